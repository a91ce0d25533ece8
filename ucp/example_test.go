package ucp_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// The host side: map memory and export it for the DPU, falling back to a
// packed rkey where no memory domain can export (as here).
func Example_hostExporter() {
	ctx, err := ucp.NewContext()
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	mem, err := ctx.MemMap(ucp.Allocate(1 << 20))
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Close()

	key, err := mem.Export()
	mode := "export"
	if errors.Is(err, ucs.ErrUnsupported) {
		mode = "rkey"
		key, err = mem.PackRkey()
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s mode, key ready: %t\n", mode, len(key) > 0)
	// Output: rkey mode, key ready: true
}

// The DPU side: inspect the host's descriptor, then import it. The
// imported mapping is the local side (memh) of RMA on host memory.
func Example_dpuImporter() {
	desc := []byte{0, 0, 0} // a zero-length mapping's descriptor, from the host
	ctx, err := ucp.NewContext(ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureExportedMemh))
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	d, err := ucp.ParseDescriptor(desc) // checked in Go; UCX never sees bad bytes
	if err != nil {
		log.Fatal(err)
	}
	host, err := ctx.MemMap(ucp.Import(desc))
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	// ep.GetMem(host, 0, n, remoteAddr, rkey) would now move host memory.

	fmt.Printf("imported %s mapping, %d bytes, dummy %t\n", host.Kind(), host.Len(), d.Dummy)
	// Output: imported imported mapping, 0 bytes, dummy true
}
