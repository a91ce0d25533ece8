package ucp

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// TestWriteFuzzCorpus writes the committed seed corpora (testdata/fuzz) of
// every fuzz target of ucp, uct and internal/wire: real keys and descriptors made here with
// the UCX release in use, plus edge cases. Run it once per release:
//
//	UCXGO_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus ./ucp/
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("UCXGO_WRITE_CORPUS") == "" {
		t.Skip("set UCXGO_WRITE_CORPUS=1 to rewrite the seed corpora")
	}
	v := ucs.LoadedVersion()
	ver := fmt.Sprintf("%d.%d", v.Major, v.Minor)
	w := corpusWriter{t: t}

	// ucp: packed rkeys of real mappings, and edge cases.
	rkeys := map[string][]byte{}
	for _, prio := range []string{"md:sysv", "md:posix", "heap"} {
		ctx, err := NewContext(WithConfig("ALLOC_PRIO", prio))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{0, 4096} {
			mem, err := ctx.Allocate(n)
			if err != nil {
				t.Fatal(err)
			}
			packed, err := mem.PackRemoteKey()
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimPrefix(prio, "md:")
			if n == 0 {
				name = "zero-length"
				// The zero-length mapping's exported descriptor is the one
				// real descriptor a machine without mlx5 hardware makes.
				desc, err := mem.Export()
				if err != nil {
					t.Fatal(err)
				}
				w.write("ucp", "FuzzImportDescriptor", "real-"+ver+"-zero-length", desc)
			}
			rkeys[name] = packed
			w.write("ucp", "FuzzUnpackRkey", "real-"+ver+"-"+name, packed)
			mem.Close()
		}
		ctx.Close()
	}
	sysv := rkeys["sysv"]
	tailed := func(tail ...byte) []byte {
		k, err := parseRkey(sysv)
		if err != nil {
			t.Fatal(err)
		}
		return append(append([]byte(nil), sysv[:keysEnd(k)]...), tail...)
	}
	w.write("ucp", "FuzzUnpackRkey", "edge-distances", tailed(0x02, 0x00, 0x13, 0x05, 0x01, 0x23, 0x0d, 0xff))
	w.write("ucp", "FuzzUnpackRkey", "edge-flush-bit", tailed(0x85, 0xff))
	w.write("ucp", "FuzzUnpackRkey", "edge-unterminated-distances", tailed(0x02, 0x00, 0x13, 0x05))
	w.write("ucp", "FuzzUnpackRkey", "edge-255-byte-key", append(append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 255}, make([]byte, 254)...), 1))
	w.write("ucp", "FuzzUnpackRkey", "edge-size-overrun", []byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 200, 1, 2, 3})
	cuda := append([]byte(nil), rkeys["heap"]...)
	cuda[8] = byte(ucs.MemoryCUDA)
	w.write("ucp", "FuzzUnpackRkey", "edge-cuda-memory-type", cuda)
	posixZero := append([]byte(nil), rkeys["posix"]...)
	if k, err := parseRkey(posixZero); err == nil && len(k.keys) > 0 {
		for _, key := range k.keys {
			if len(key) == wire.PosixRkeyFixed {
				copy(key[wire.PosixLengthOffset:], make([]byte, 8)) // aliases posixZero
			}
		}
	}
	w.write("ucp", "FuzzUnpackRkey", "edge-posix-zero-length", posixZero)

	// ucp: descriptors in the wire format of UCX 1.16+ (one "ib" MD).
	w.write("ucp", "FuzzImportDescriptor", "edge-ib-6", corpusDescriptor(6, 1))
	w.write("ucp", "FuzzImportDescriptor", "edge-ib-14", corpusDescriptor(14, 1))
	w.write("ucp", "FuzzImportDescriptor", "edge-two-mds", corpusDescriptor(14, 2))
	w.write("ucp", "FuzzImportDescriptor", "edge-header-only", corpusDescriptor(6, 1)[:descHeaderSize])
	w.write("ucp", "FuzzImportDescriptor", "edge-dummy-plus-one", []byte{0, 0, 0, 0})
	long := corpusDescriptor(6, 1)
	long[descHeaderSize] = 0 // the u16 escape of the entry size
	long = append(long[:descHeaderSize+1], append([]byte{byte(len(long) - descHeaderSize - 1), 0}, long[descHeaderSize+1:]...)...)
	w.write("ucp", "FuzzImportDescriptor", "edge-u16-entry-size", long)

	// uct: real keys of each MD's allocation (index = position in the
	// target's MD list: self, tcp, sysv, posix, cma).
	for i, name := range []string{"self", "tcp", "sysv", "posix", "cma"} {
		md, err := uct.OpenMD(name)
		if err != nil {
			t.Fatal(err)
		}
		key := []byte{}
		if md.Attr().Flags.Has(uct.FlagAlloc) {
			mem, err := md.Alloc(4096, 0)
			if err != nil {
				t.Fatal(err)
			}
			if key, err = mem.PackRemoteKey(); err != nil {
				t.Fatal(err)
			}
			mem.Close()
			bad := append([]byte(nil), key...)
			if name == "posix" {
				copy(bad[16:], make([]byte, 8))
				w.write("uct", "FuzzUnpackRkey", "edge-posix-zero-length", uint8(i), bad)
				file := append([]byte(nil), key...)
				file[7] &^= 0xc0 // neither procfs nor shm_open: a directory follows
				w.write("uct", "FuzzUnpackRkey", "edge-posix-file-backed", uint8(i), append(file, "/tmp\x00"...))
			}
		}
		md.Close()
		w.write("uct", "FuzzUnpackRkey", "real-"+ver+"-"+name, uint8(i), key)
		w.write("uct", "FuzzAttach", "edge-"+name+"-ib-6", uint8(i), []byte{0x11, 0x22, 0x33, 0x44, 0x05, 0x00})
		w.write("uct", "FuzzAttach", "edge-"+name+"-ib-14", uint8(i), []byte{0x11, 0x22, 0x33, 0x44, 0x05, 0x00, 1, 2, 3, 4, 5, 6, 7, 8})
		w.write("uct", "FuzzAttach", "edge-"+name+"-ib-20", uint8(i), make([]byte, 20))
	}
}

// corpusDescriptor builds an exported descriptor of UCX 1.16+ with mds
// "ib" entries of an mkey of size s (as ParseDescriptor's tests do).
func corpusDescriptor(s, mds int) []byte {
	le := binary.LittleEndian
	b := make([]byte, descHeaderSize)
	b[0] = descHeaderSize - 1
	le.PutUint16(b[1:], descFlagExport)
	le.PutUint64(b[3:], 1<<mds-1)
	le.PutUint64(b[12:], 0x7f0000001000)
	le.PutUint64(b[20:], 1<<20)
	le.PutUint64(b[28:], 0x1122334455667788)
	le.PutUint64(b[36:], 42)
	gid := []byte{'i', 'b', 0xb8, 0xce, 0xf6, 0x03, 0x00, 0x12, 0x34, 0x56}
	for range mds {
		b = append(b, byte(s+len(gid)+3-1), byte(s))
		for i := range s {
			b = append(b, byte(0x10+i))
		}
		b = append(append(b, byte(len(gid))), gid...)
	}
	return b
}

// corpusWriter writes files in the format of go test's fuzzing corpus.
type corpusWriter struct{ t *testing.T }

func (w corpusWriter) write(pkg, target, name string, vals ...any) {
	var sb strings.Builder
	sb.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&sb, "[]byte(%q)\n", v)
		case uint8:
			fmt.Fprintf(&sb, "byte(%q)\n", v)
		default:
			w.t.Fatalf("corpus value of type %T", v)
		}
	}
	dir := filepath.Join("..", pkg, "testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(sb.String()), 0o644); err != nil {
		w.t.Fatal(err)
	}
}
