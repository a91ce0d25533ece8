package ucp_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

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
	mem, err := ctx.Allocate(1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Close()

	key, err := mem.Export()
	mode := "export"
	if errors.Is(err, ucs.ErrUnsupported) {
		mode = "rkey"
		key, err = mem.PackRemoteKey()
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
	host, err := ctx.Import(d)
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	// ep.GetMem(host, 0, n, remoteAddr, rkey) would now move host memory.

	fmt.Printf("imported %s mapping, %d bytes, dummy %t\n", host.Kind(), host.Len(), d.Dummy)
	// Output: imported imported mapping, 0 bytes, dummy true
}

// A latency-sensitive client: its waits busy-poll for up to a millisecond
// before sleeping (the default is DefaultSpin), while the target worker is
// progressed by Run, as a service's would be. The key is used on the
// endpoint it was unpacked on.
func ExampleWithSpin() {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", "posix,sysv,self"))
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	client, err := ctx.NewWorker(ucp.WithSpin(time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	target, err := ctx.NewWorker()
	if err != nil {
		log.Fatal(err)
	}
	defer target.Close()
	run, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- target.Run(run) }()
	defer func() { stop(); <-ran }()

	addr, err := target.PackAddress()
	if err != nil {
		log.Fatal(err)
	}
	ep, err := client.ConnectWorker(addr, ucp.WithPeerErrorHandling(false))
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close(context.Background(), ucp.CloseForce)
	mem, err := ctx.Allocate(4096)
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Close()
	b, err := mem.Bytes()
	if err != nil {
		log.Fatal(err)
	}
	copy(b, "hello")
	packed, err := mem.PackRemoteKey() // sent to the client in a real program
	if err != nil {
		log.Fatal(err)
	}
	rkey, err := ep.UnpackRemoteKey(context.Background(), packed)
	if err != nil {
		log.Fatal(err)
	}
	defer rkey.Close()

	buf := make([]byte, 5)
	req, err := ep.Get(buf, mem.Address(), rkey)
	if err != nil {
		log.Fatal(err)
	}
	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := req.Wait(wait); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(buf))
	// Output: hello
}
