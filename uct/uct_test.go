package uct_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// The memory domains every supported UCX offers on any Linux machine.
var everywhere = []string{"self", "tcp", "sysv", "posix", "cma"}

func openMD(t *testing.T, name string, opts ...uct.MDOption) *uct.MD {
	t.Helper()
	md, err := uct.OpenMD(name, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { md.Close() })
	return md
}

// memOn makes a 64 KiB Mem on md: registered Go memory where the MD
// registers, allocated where it allocates. An MD that can do neither (tcp
// and cma from UCX 1.19 on) must refuse both, and memOn returns nil.
func memOn(t *testing.T, md *uct.MD) *uct.Mem {
	t.Helper()
	var mem *uct.Mem
	var err error
	switch f := md.Attr().Flags; {
	case f.Has(uct.FlagReg):
		mem, err = md.Register(make([]byte, 64<<10), uct.MemAccessAll)
	case f.Has(uct.FlagAlloc):
		mem, err = md.Alloc(64<<10, uct.MemAccessAll)
	default:
		_, err = md.Register(make([]byte, 64), 0)
		require.ErrorIs(t, err, ucs.ErrUnsupported)
		_, err = md.Alloc(64, 0)
		require.ErrorIs(t, err, ucs.ErrUnsupported)
		return nil
	}
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	return mem
}

func TestDiscoveryFindsTheHostMDs(t *testing.T) {
	comps, err := uct.Components()
	require.NoError(t, err)
	found := map[string]string{}
	for _, c := range comps {
		for _, md := range c.MDNames {
			found[md] = c.Name
		}
	}
	for _, name := range everywhere {
		assert.Contains(t, found, name, "memory domain %q not discovered (found %v)", name, found)
	}
}

func TestAttributesDecoded(t *testing.T) {
	posix := openMD(t, "posix").Attr()
	assert.Equal(t, "posix", posix.ComponentName)
	assert.True(t, posix.Flags.Has(uct.FlagAlloc|uct.FlagNeedRkey), "posix flags %s", posix.Flags)
	assert.False(t, posix.Flags.Has(uct.FlagReg))
	assert.False(t, posix.Flags.Has(uct.FlagExportedMkey))
	assert.True(t, posix.AllocMemTypes.Has(ucs.MemoryHost))
	assert.Equal(t, 24, posix.RkeyPackedSize)
	assert.Zero(t, posix.ExportedMkeyPackedSize)
	assert.Nil(t, posix.GlobalID, "non-IB MDs report an all-zero global id")
	assert.Contains(t, posix.Flags.Names(), "ALLOC")

	sysv := openMD(t, "sysv").Attr()
	assert.Equal(t, 12, sysv.RkeyPackedSize)

	self := openMD(t, "self").Attr()
	assert.True(t, self.Flags.Has(uct.FlagReg))
	assert.True(t, self.RegMemTypes.Has(ucs.MemoryHost))
	assert.Equal(t, "REG|NEED_RKEY", self.Flags.String())
}

func TestOpenUnknownMD(t *testing.T) {
	_, err := uct.OpenMD("no-such-md")
	require.ErrorIs(t, err, ucs.ErrNoDevice)
	assert.Contains(t, err.Error(), `open md "no-such-md"`)
}

func TestConfigModification(t *testing.T) {
	md := openMD(t, "posix", uct.WithConfig("POSIX_DIR", "/dev/shm"))
	mem, err := md.Alloc(4096, 0)
	require.NoError(t, err)
	require.NoError(t, mem.Close())

	_, err = uct.OpenMD("posix", uct.WithConfig("NO_SUCH_VARIABLE", "1"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config NO_SUCH_VARIABLE="1"`)
}

func TestRegisterGoMemory(t *testing.T) {
	for _, name := range everywhere {
		t.Run(name, func(t *testing.T) {
			md := openMD(t, name)
			buf := bytes.Repeat([]byte{0x5a}, 1<<20)
			mem, err := md.Register(buf, uct.MemAccessAll)
			if !md.Attr().Flags.Has(uct.FlagReg) {
				require.ErrorIs(t, err, ucs.ErrUnsupported)
				assert.Contains(t, err.Error(), "md lacks UCT_MD_FLAG_REG")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, ucs.MemRegistered, mem.Kind())
			assert.Equal(t, len(buf), mem.Len())
			got, err := mem.Bytes()
			require.NoError(t, err)
			assert.Equal(t, unsafe.SliceData(buf), unsafe.SliceData(got), "Bytes is the registered slice")
			require.NoError(t, mem.Close())
		})
	}
}

func TestRegisterEmptyRefused(t *testing.T) {
	md := openMD(t, "self")
	_, err := md.Register(nil, 0)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	_, err = md.RegisterPointer(nil, 10, 0)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	// A length no slice can hold: self, tcp and cma took it, and Bytes
	// then panicked in unsafe.Slice.
	var b [8]byte
	_, err = md.RegisterPointer(unsafe.Pointer(&b[0]), -1, 0)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
}

func TestRegisterCMemory(t *testing.T) {
	md := openMD(t, "self")
	// mmap'ed memory stands for memory the Go runtime does not manage.
	region, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	defer syscall.Munmap(region)
	mem, err := md.RegisterPointer(unsafe.Pointer(&region[0]), len(region), uct.MemAccessAll)
	require.NoError(t, err)
	assert.Equal(t, uint64(uintptr(unsafe.Pointer(&region[0]))), mem.Address())
	require.NoError(t, mem.Close())
}

func TestAllocSharedMemory(t *testing.T) {
	for _, name := range []string{"posix", "sysv"} {
		t.Run(name, func(t *testing.T) {
			md := openMD(t, name)
			mem, err := md.Alloc(1<<20, uct.MemAccessAll)
			require.NoError(t, err)
			assert.Equal(t, ucs.MemAllocated, mem.Kind())
			assert.GreaterOrEqual(t, mem.Len(), 1<<20)
			b, err := mem.Bytes()
			require.NoError(t, err)
			for i := range b {
				b[i] = byte(i)
			}
			assert.Equal(t, byte(255), b[255])
			require.NoError(t, mem.Close())
		})
	}
	_, err := openMD(t, "self").Alloc(4096, 0)
	require.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.Contains(t, err.Error(), "UCT_MD_FLAG_ALLOC")
	_, err = openMD(t, "posix").Alloc(0, 0)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
}

func TestRkeyRoundTrip(t *testing.T) {
	for _, name := range everywhere {
		t.Run(name, func(t *testing.T) {
			md := openMD(t, name)
			mem := memOn(t, md)
			if mem == nil {
				return
			}
			packed, err := mem.PackRemoteKey()
			require.NoError(t, err)
			require.Len(t, packed, md.Attr().RkeyPackedSize)
			rk, err := md.UnpackRemoteKey(packed)
			require.NoError(t, err)
			_, err = rk.Value()
			require.NoError(t, err)
			require.NoError(t, rk.Close())
		})
	}
}

func TestUnpackRkeyLengthChecked(t *testing.T) {
	md := openMD(t, "posix")
	mem := memOn(t, md)
	packed, err := mem.PackRemoteKey()
	require.NoError(t, err)
	for _, n := range []int{0, 1, len(packed) - 1, len(packed) + 1, 4096} {
		buf := make([]byte, n)
		copy(buf, packed)
		_, err := md.UnpackRemoteKey(buf)
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "length %d", n)
		assert.Contains(t, err.Error(), "md packs 24")
	}
}

// Export must refuse, without calling UCX, on every MD that lacks the
// capability; UCX would answer success there.
func TestExportUnsupportedOnEveryMDHere(t *testing.T) {
	reports, err := uct.Probe()
	require.NoError(t, err)
	for _, r := range reports {
		if r.MD == "" || r.HaveExportedMkey() == nil {
			continue
		}
		t.Run(r.MD, func(t *testing.T) {
			md := openMD(t, r.MD)
			require.ErrorIs(t, md.HaveExportedMkey(), ucs.ErrUnsupported)
			mem := memOn(t, md)
			if mem == nil {
				return
			}
			key, err := mem.Export()
			require.Nil(t, key, "no buffer on an MD that cannot export")
			require.ErrorIs(t, err, ucs.ErrUnsupported)
			var ue *ucs.Error
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, ucs.ErrUnsupported, ue.Status())
			assert.Equal(t, `uct: export mkey on md "`+r.MD+`": Unsupported operation: md lacks UCT_MD_FLAG_EXPORTED_MKEY`, err.Error())
		})
	}
}

// Attach on an MD that cannot export must fail in Go: UCX's tcp attach entry
// is a NULL pointer up to 1.18 and no MD checks the length.
func TestAttachRefusedOnMDsThatCannotExport(t *testing.T) {
	for _, name := range everywhere {
		t.Run(name, func(t *testing.T) {
			md := openMD(t, name)
			for _, n := range []int{0, 6, 14, 20, 4096} {
				mem, err := md.Attach(make([]byte, n), uct.WithHideErrors())
				require.Nil(t, mem)
				require.ErrorIs(t, err, ucs.ErrUnsupported, "length %d", n)
				assert.Contains(t, err.Error(), `attach exported mkey on md "`+name+`"`)
			}
		})
	}
}

// exportingMD opens the first MD that can export, or skips the test.
func exportingMD(t *testing.T) *uct.MD {
	t.Helper()
	err := uct.HaveExportedMkey()
	if errors.Is(err, ucs.ErrUnsupported) {
		t.Skipf("needs a memory domain with UCT_MD_FLAG_EXPORTED_MKEY (mlx5 DevX: ConnectX-6 Dx+, BlueField-2/3); uct.Probe found none: %v", err)
	}
	require.NoError(t, err)
	reports, err := uct.Probe()
	require.NoError(t, err)
	for _, r := range reports {
		if r.HaveExportedMkey() == nil {
			return openMD(t, r.MD)
		}
	}
	t.Fatal("HaveExportedMkey said yes, Probe names none")
	return nil
}

func TestAttachWrongLengthRefusedBeforeUCX(t *testing.T) {
	md := exportingMD(t)
	size := md.Attr().ExportedMkeyPackedSize
	for _, n := range []int{0, size - 1, size + 1, 4096} {
		_, err := md.Attach(make([]byte, n), uct.WithHideErrors())
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "length %d", n)
	}
}

func TestExportAttachRoundTrip(t *testing.T) {
	md := exportingMD(t)
	mem, err := md.Register(make([]byte, 1<<20), uct.MemAccessAll)
	require.NoError(t, err)
	defer mem.Close()
	key, err := mem.Export()
	require.NoError(t, err)
	require.Len(t, key, md.Attr().ExportedMkeyPackedSize)

	importer, err := md.Component().OpenMD(md.Name())
	require.NoError(t, err)
	defer importer.Close()
	att, err := importer.Attach(key)
	require.NoError(t, err)
	assert.Equal(t, ucs.MemImported, att.Kind())
	_, err = att.Bytes()
	require.ErrorIs(t, err, ucs.ErrInvalidAddr)
	_, err = att.Export()
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	require.NoError(t, att.Close())
}

// posixChain opens a posix MD, an allocation on it and a remote key of it,
// for the tests that close them; they must close all three.
func posixChain(t *testing.T) (*uct.MD, *uct.Mem, []byte, *uct.RemoteKey) {
	t.Helper()
	md, err := uct.OpenMD("posix")
	require.NoError(t, err)
	mem, err := md.Alloc(4096, 0)
	require.NoError(t, err)
	packed, err := mem.PackRemoteKey()
	require.NoError(t, err)
	rk, err := md.UnpackRemoteKey(packed)
	require.NoError(t, err)
	return md, mem, packed, rk
}

func TestDoubleClose(t *testing.T) {
	md, mem, _, rk := posixChain(t)
	for range 2 {
		require.NoError(t, rk.Close())
		require.NoError(t, mem.Close())
		require.NoError(t, md.Close())
	}
}

func TestUseAfterClose(t *testing.T) {
	md, mem, packed, rk := posixChain(t)
	var err error

	require.NoError(t, rk.Close())
	_, err = rk.Value()
	require.ErrorIs(t, err, ucs.ErrClosed)

	require.NoError(t, mem.Close())
	_, err = mem.PackRemoteKey()
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = mem.Export()
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = mem.Bytes()
	require.ErrorIs(t, err, ucs.ErrClosed)

	require.NoError(t, md.Close())
	_, err = md.Alloc(4096, 0)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = md.Register(make([]byte, 8), 0)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = md.UnpackRemoteKey(packed)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = md.Attach(make([]byte, 6))
	require.ErrorIs(t, err, ucs.ErrClosed)
	assert.Contains(t, err.Error(), `md "posix" is closed`)
}

// Closing the parent first leaves children usable; the MD's UCX object goes
// when its last child is closed.
func TestCloseParentFirst(t *testing.T) {
	base := ucs.LiveHandles()
	md, err := uct.OpenMD("sysv")
	require.NoError(t, err)
	mem, err := md.Alloc(8192, 0)
	require.NoError(t, err)
	require.NoError(t, md.Close())
	assert.Equal(t, base+2, ucs.LiveHandles(), "md kept alive by its allocation")

	packed, err := mem.PackRemoteKey()
	require.NoError(t, err, "a child stays usable after its parent is closed")
	b, err := mem.Bytes()
	require.NoError(t, err)
	b[0] = 1
	assert.Len(t, packed, 12)
	require.NoError(t, mem.Close())
	assert.Equal(t, base, ucs.LiveHandles())
}

// Handles dropped without Close are released by their cleanups.
func TestLeakedHandlesReleased(t *testing.T) {
	base, leaked := ucs.LiveHandles(), ucs.LeakedHandles()
	func() {
		md, err := uct.OpenMD("posix")
		require.NoError(t, err)
		_, err = md.Alloc(4096, 0)
		require.NoError(t, err)
		_, err = md.Register(make([]byte, 16), 0)
		require.ErrorIs(t, err, ucs.ErrUnsupported)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for ucs.LiveHandles() != base && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, base, ucs.LiveHandles())
	assert.Equal(t, leaked+2, ucs.LeakedHandles())
}

func TestFlagsJSONRoundTrip(t *testing.T) {
	f := uct.FlagAlloc | uct.FlagExportedMkey | uct.MDFlags(1<<40)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	assert.Equal(t, `["ALLOC","EXPORTED_MKEY","bit40"]`, string(b))
	var back uct.MDFlags
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, f, back)
	require.Error(t, json.Unmarshal([]byte(`["NOPE"]`), &back))

	m := ucs.MemoryTypes(1<<ucs.MemoryHost | 1<<ucs.MemoryCUDA)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	assert.Equal(t, `["host","cuda"]`, string(b))
	var mb ucs.MemoryTypes
	require.NoError(t, json.Unmarshal(b, &mb))
	assert.Equal(t, m, mb)
}

// TestCloseNilHandles: cleanup code closes what it may never have got.
func TestCloseNilHandles(t *testing.T) {
	var (
		md  *uct.MD
		mem *uct.Mem
		rk  *uct.RemoteKey
	)
	require.NoError(t, md.Close())
	require.NoError(t, mem.Close())
	require.NoError(t, rk.Close())
	require.NoError(t, new(uct.MD).Close())
}
