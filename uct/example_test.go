package uct_test

import (
	"errors"
	"fmt"

	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// A host exporter checks for an export-capable memory domain first.
func ExampleHaveExportedMkey() {
	err := uct.HaveExportedMkey()
	if errors.Is(err, ucs.ErrUnsupported) {
		fmt.Println("no exported keys here; fall back to rkeys")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exported keys available")
}

// Export refuses, with the reason, on memory domains that cannot export.
func ExampleMem_Export() {
	md, err := uct.OpenMD("posix")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer md.Close()
	mem, err := md.Alloc(1<<20, uct.MemAccessAll)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Close()

	if _, err := mem.Export(); errors.Is(err, ucs.ErrUnsupported) {
		fmt.Println(err)
	}
	// Output: uct: export mkey on md "posix": Unsupported operation: md lacks UCT_MD_FLAG_EXPORTED_MKEY
}

// Register a Go buffer; it stays pinned until the registration is closed.
func ExampleMD_Register() {
	md, err := uct.OpenMD("self")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer md.Close()
	buf := make([]byte, 4096)
	mem, err := md.Register(buf, uct.MemAccessAll)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Close()
	key, err := mem.PackRemoteKey()
	fmt.Printf("registered %d bytes, rkey %d bytes, err %v\n", mem.Len(), len(key), err)
	// Output: registered 4096 bytes, rkey 0 bytes, err <nil>
}

// Pack a remote key and unpack it, as a peer would.
func ExampleMD_UnpackRemoteKey() {
	md, err := uct.OpenMD("sysv")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer md.Close()
	mem, err := md.Alloc(64<<10, uct.MemAccessAll)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Close()
	packed, err := mem.PackRemoteKey()
	if err != nil {
		fmt.Println(err)
		return
	}
	rk, err := md.UnpackRemoteKey(packed)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rk.Close()
	fmt.Printf("%d-byte sysv rkey unpacked\n", len(packed))
	// Output: 12-byte sysv rkey unpacked
}
