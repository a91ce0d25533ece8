package uct

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ucxgo/ucx/ucs"
)

// uctFuzzMDs are the memory domains every supported UCX has here, each
// with a real allocation (where it allocates) whose packed rkey seeds the
// corpus and bounds what fuzzed keys may name.
type uctFuzzMD struct {
	md     *MD
	packed []byte // a real key of an allocation on md (nil: none)
}

func openFuzzMDs(f *testing.F) []uctFuzzMD {
	var out []uctFuzzMD
	for _, name := range []string{"self", "tcp", "sysv", "posix", "cma"} {
		md, err := OpenMD(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { md.Close() })
		fm := uctFuzzMD{md: md}
		if md.Attr().Flags.Has(FlagAlloc) {
			mem, err := md.Alloc(4096, 0)
			if err != nil {
				f.Fatal(err)
			}
			f.Cleanup(func() { mem.Close() })
			if fm.packed, err = mem.PackRemoteKey(); err != nil {
				f.Fatal(err)
			}
		}
		out = append(out, fm)
	}
	return out
}

// ownSegment reports whether UCX may unpack a fuzzed key: a sysv or posix
// key names an OS object (a shmid, /proc/PID/fd/FD or a /dev/shm name) that
// UCX attaches with this process's rights, so only the segment of the
// test's own allocation, at most its length, is let through.
func ownSegment(component string, key, real []byte) bool {
	le := binary.LittleEndian
	switch component {
	case "sysv":
		return le.Uint32(key) == le.Uint32(real)
	case "posix":
		return le.Uint64(key) == le.Uint64(real) && le.Uint64(key[16:]) <= le.Uint64(real[16:])
	}
	return true // self, tcp, cma read nothing
}

// FuzzUnpackRkey feeds foreign bytes to MD.UnpackRemoteKey on each MD: a key of
// the wrong length or malformed for the component is refused in Go
// (ucs.ErrInvalidParam); a well-formed one naming the test's own segment is
// unpacked by the real uct_rkey_unpack and released.
func FuzzUnpackRkey(f *testing.F) {
	mds := openFuzzMDs(f)
	for i, m := range mds {
		f.Add(uint8(i), m.packed)
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		m := mds[int(which)%len(mds)]
		op := m.md.op.unpack
		want := len(b) == m.md.attr.RkeyPackedSize
		if want {
			want = checkRkey(op, m.md.component.Name, b) == nil
		}
		if !want {
			if _, err := m.md.UnpackRemoteKey(b); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("md %s: a malformed key was not refused: %v", m.md.name, err)
			}
			return
		}
		if m.packed != nil && !ownSegment(m.md.component.Name, b, m.packed) {
			return
		}
		rk, err := m.md.UnpackRemoteKey(b)
		if err == nil {
			rk.Close()
		}
	})
}

// FuzzAttach feeds foreign bytes to MD.Attach on each MD. None here can
// export, so every call must be refused in Go with ucs.ErrUnsupported (on
// tcp up to UCX 1.18 uct_md_mem_attach is a NULL function pointer). An MD
// that can export (mlx5 DevX hardware) gets the bytes of the right length
// for real; elsewhere the wrong length must be refused.
func FuzzAttach(f *testing.F) {
	mds := openFuzzMDs(f)
	for i := range mds {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte{1, 2, 3, 4, 5, 6})
		f.Add(uint8(i), make([]byte, 14))
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		md := mds[int(which)%len(mds)].md
		mem, err := md.Attach(b, WithHideErrors())
		if md.HaveExportedMkey() != nil {
			if !errors.Is(err, ucs.ErrUnsupported) {
				t.Fatalf("md %s cannot export, yet Attach answered %v", md.name, err)
			}
			return
		}
		if len(b) != md.attr.ExportedMkeyPackedSize && !errors.Is(err, ucs.ErrInvalidParam) {
			t.Fatalf("md %s: %d bytes of a %d-byte key not refused: %v", md.name, len(b), md.attr.ExportedMkeyPackedSize, err)
		}
		if err == nil {
			mem.Close()
		}
	})
}
