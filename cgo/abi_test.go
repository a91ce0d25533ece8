package cgo

import (
	"bytes"
	"syscall"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// openAll opens every memory domain libuct lists here.
func openAll(t *testing.T) map[string]MD {
	t.Helper()
	comps, st := Components()
	require.Zero(t, st, "uct_query_components")
	mds := map[string]MD{}
	for _, c := range comps {
		info, st := c.Query()
		require.Zero(t, st)
		for _, name := range info.MDNames {
			md, _, st := c.OpenMD(name, nil)
			require.Zero(t, st, "open md %s: %s", name, StatusString(st))
			t.Cleanup(md.Close)
			mds[info.Name+"/"+name] = md
		}
	}
	require.NotEmpty(t, mds)
	return mds
}

// TestABIQueryV2AgreesWithV1 proves the declared uct_md_attr_v2_t against
// the library: every field the installed v1 query also reports must agree.
func TestABIQueryV2AgreesWithV1(t *testing.T) {
	for name, md := range openAll(t) {
		t.Run(name, func(t *testing.T) {
			v2, st := md.Query()
			require.Zero(t, st)
			v1, st := md.QueryV1()
			require.Zero(t, st)
			type common struct {
				MaxAlloc, MaxReg, Flags, RegMemTypes, DetectMemTypes uint64
				AllocMemTypes, AccessMemTypes, RkeyPackedSize        uint64
				RegCostFixed, RegCostPerByte                         float64
				LocalCPUs                                            [16]uint64
				ComponentName                                        string
			}
			pick := func(a MDAttr) common {
				return common{a.MaxAlloc, a.MaxReg, a.Flags, a.RegMemTypes, a.DetectMemTypes,
					a.AllocMemTypes, a.AccessMemTypes, a.RkeyPackedSize,
					a.RegCostFixed, a.RegCostPerByte, a.LocalCPUs, a.ComponentName}
			}
			a, b := pick(v1), pick(v2)
			if a.ComponentName == "posix" {
				// posix's max_alloc is the free space of its shared-memory
				// directory at the moment of each query: other processes
				// change it between the two (1.19.1 in the matrix, once).
				a.MaxAlloc, b.MaxAlloc = 0, 0
			}
			if d := cmp.Diff(a, b); d != "" {
				t.Fatalf("uct_md_query_v2 disagrees with uct_md_query (-v1 +v2):\n%s", d)
			}
		})
	}
}

// TestABIFieldLayout asks the library for one field at a time and checks
// that it writes exactly the bytes this build declares for that field, and
// nothing past the declared struct size.
func TestABIFieldLayout(t *testing.T) {
	size, fields := AttrV2Layout()
	// sizeof(uct_md_attr_v2_t) by the first release of each layout.
	wantSize := map[uint]uintptr{16: 528, 18: 536, 22: 544}[AttrLayoutSince()]
	require.Equal(t, wantSize, size, "sizeof(uct_md_attr_v2_t) for the loaded UCX %v", LoadedVersion())
	for name, md := range openAll(t) {
		t.Run(name, func(t *testing.T) {
			all := uint64(0)
			for _, f := range fields {
				all |= f.Bit
				written := writtenBytes(t, md, f.Bit, size)
				want := [2]uintptr{f.Offset, f.Offset + f.Size}
				require.Equal(t, want, written, "field %s (bit %#x): bytes written by the library", f.Name, f.Bit)
			}
			// Every field at once: nothing beyond the declared size.
			written := writtenBytes(t, md, all, size)
			require.LessOrEqual(t, written[1], size, "library wrote past sizeof(uct_md_attr_v2_t)")
		})
	}
}

// writtenBytes queries with mask into buffers pre-filled with 0x00 and 0xff
// and returns [first, last+1) of the bytes that changed in either (a written
// byte cannot equal both fills). The 8-byte field_mask is excluded.
func writtenBytes(t *testing.T, md MD, mask uint64, size uintptr) [2]uintptr {
	const slack = 512
	lo, hi := ^uintptr(0), uintptr(0)
	for _, fill := range []byte{0x00, 0xff} {
		buf := bytes.Repeat([]byte{fill}, int(size)+slack)
		require.Zero(t, md.QueryRaw(mask, buf))
		for i := uintptr(8); i < uintptr(len(buf)); i++ {
			if buf[i] != fill {
				lo, hi = min(lo, i), max(hi, i+1)
			}
		}
	}
	if hi == 0 {
		return [2]uintptr{}
	}
	return [2]uintptr{lo, hi}
}

// TestABIPackV2MatchesV1 proves the uct_md_mkey_pack_v2 prototype (six
// parameters from 1.16 on): on every MD that packs a non-empty rkey, the v2
// pack without flags must produce the v1 pack's bytes.
func TestABIPackV2MatchesV1(t *testing.T) {
	tested := 0
	for name, md := range openAll(t) {
		attr, st := md.Query()
		require.Zero(t, st)
		if attr.RkeyPackedSize == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var h Memh
			var addr unsafe.Pointer
			const n = 1 << 16
			switch {
			case attr.Flags&0x1 != 0: // ALLOC
				a, st := md.Alloc(n, 0)
				require.Zero(t, st, StatusString(st))
				t.Cleanup(func() { a.Free() })
				h, addr = a.Memh(), a.Address()
			case attr.Flags&0x2 != 0: // REG
				mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
				require.NoError(t, err)
				t.Cleanup(func() { syscall.Munmap(mem) })
				addr = unsafe.Pointer(&mem[0])
				h, st = md.Register(addr, n, 0)
				require.Zero(t, st)
				t.Cleanup(func() { md.Deregister(h) })
			default:
				t.Skipf("md %s can neither allocate nor register", name)
			}
			v1 := make([]byte, attr.RkeyPackedSize)
			over, st := md.PackMkeyV1(h, v1)
			require.Zero(t, st)
			require.False(t, over)
			v2 := make([]byte, attr.RkeyPackedSize)
			over, st = md.PackMkey(h, addr, n, false, v2)
			require.Zero(t, st)
			require.False(t, over)
			require.Equal(t, v1, v2)
			tested++
		})
	}
	require.NotZero(t, tested, "no MD packs a non-empty rkey: nothing compared")
}

// TestLayoutFollowsLoadedRelease checks that the layout is chosen from the
// loaded release, whatever the headers built against.
func TestLayoutFollowsLoadedRelease(t *testing.T) {
	l := LoadedVersion()
	require.True(t, LoadedSupported(), "loaded UCX %v (built against %v)", l, BuiltVersion())
	want := uint(16)
	switch {
	case l.Minor >= 22:
		want = 22
	case l.Minor >= 18:
		want = 18
	}
	require.Equal(t, want, AttrLayoutSince(), "loaded UCX %v", l)
	require.Equal(t, "Unsupported operation", StatusString(-22))
}
