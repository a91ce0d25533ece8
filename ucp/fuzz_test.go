package ucp_test

import (
	"testing"

	"github.com/ucxgo/ucx/ucp"
)

// FuzzImportDescriptor feeds foreign bytes to the parser and, when they
// pass, to the real import (ucp_mem_map with exported_memh_buffer). It must
// never crash: the parser and the local-MD check stand before UCX.
func FuzzImportDescriptor(f *testing.F) {
	f.Add([]byte{0, 0, 0})
	f.Add(sampleDescriptor(6))
	f.Add(sampleDescriptor(14))
	f.Add([]byte{43, 1, 0})
	ctx, err := ucp.NewContext()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ctx.Close() })
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ucp.ParseDescriptor(b)
		if err != nil {
			return
		}
		if !d.Dummy() && len(d.MDs()) == 0 {
			t.Fatalf("accepted a descriptor without memory domains: %x", b)
		}
		mem, err := ctx.Import(d)
		if err == nil {
			mem.Close()
		}
	})
}
