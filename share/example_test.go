package share_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ucxgo/ucx/share"
)

// A host shares a buffer, an importer reads and writes it, the host
// revokes it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	secret := []byte("a secret of at least 16 bytes")
	sealer, err := share.NewHMACSealer(secret)
	if err != nil {
		panic(err)
	}

	// The host: shared memory comes from NewMemory.
	msg := "hello from the host's memory"
	mem, err := share.NewMemory(len(msg))
	if err != nil {
		panic(err)
	}
	defer mem.Close() // after exp.Close (deferred calls run last first)
	buf := mem.Bytes()
	copy(buf, msg)
	exp, err := share.NewExporter(sealer)
	if err != nil {
		panic(err)
	}
	defer exp.Close()
	if err := exp.Add(ctx, "greeting", mem, share.ReadWrite); err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", hostAddr) // the host's address on the DPU's network
	if err != nil {
		panic(err)
	}
	go exp.Serve(l)

	// The importer (another process, usually: the DPU).
	imp, err := share.Dial(ctx, "tcp", l.Addr().String(), sealer)
	if err != nil {
		panic(err)
	}
	defer imp.Close()
	r, err := imp.Region("greeting")
	if err != nil {
		panic(err)
	}
	p := make([]byte, r.Len())
	if _, err := r.ReadAt(p, 0); err != nil {
		panic(err)
	}
	fmt.Printf("read %q\n", p)
	if _, err := r.WriteAt([]byte("HELLO"), 0); err != nil {
		panic(err)
	}
	fmt.Printf("the host sees %q\n", buf)

	// The host takes it back: Revoke returns once the importer
	// acknowledged, and says who did.
	rev, err := exp.Revoke(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(rev.Acknowledged), "importer acknowledged, the one whose session is", rev.Acknowledged[0] == imp.SessionID())
	<-imp.Revoked()
	_, err = r.ReadAt(p, 0)
	fmt.Println(err != nil)
	// Output:
	// read "hello from the host's memory"
	// the host sees "HELLO from the host's memory"
	// 1 importer acknowledged, the one whose session is true
	// true
}
