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
	// w.LocalRegion(ctx, host) would now reach the host's memory (ReadAt,
	// WriteAt, GetMem and PutMem with a local mapping).

	fmt.Printf("imported %s mapping, %d bytes, dummy %t\n", host.Kind(), host.Len(), d.Dummy())
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
	req, err := getAt(buf, mem.Address(), rkey)
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

// The DPU side in rkey mode, as a newcomer writes it: connect to the host's
// listener, unpack the host's packed region (its address, length and key)
// at once, and use its memory with offsets. (Both sides run in this
// process here; the packed region would arrive in a message.)
func ExampleEndpoint_UnpackRegion() {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", "tcp"))
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	// The host: memory, a listener, a worker progressed by Run.
	hostWorker, err := ctx.NewWorker()
	if err != nil {
		log.Fatal(err)
	}
	defer hostWorker.Close()
	mem, err := ctx.Allocate(1 << 16)
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Close()
	l, err := hostWorker.Listen("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *ucp.Endpoint, 1)
	go func() {
		ep, err := l.Accept(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		accepted <- ep
	}()
	packed, err := mem.PackRegion()
	if err != nil {
		log.Fatal(err)
	}

	// The DPU.
	w, err := ctx.NewWorker()
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	run, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- hostWorker.Run(run) }()
	defer func() { stop(); <-ran }()
	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ep, err := w.Connect(wait, l.Addr().String()) // returns once the host accepted
	if err != nil {
		log.Fatal(err)
	}
	// Closes are bounded (a flush close waits for the peer), the DPU's
	// first: its worker is progressed only by its own calls.
	defer func() { (<-accepted).Close(wait, ucp.CloseFlush) }()
	defer ep.Close(wait, ucp.CloseFlush)

	region, err := ep.UnpackRegion(wait, packed)
	if err != nil {
		log.Fatal(err)
	}
	defer region.Key().Close()
	if _, err := region.WriteAtContext(wait, []byte("written by the DPU"), 1000); err != nil {
		log.Fatal(err)
	}
	got := make([]byte, 18)
	if _, err := region.ReadAtContext(wait, got, 1000); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(got))

	// From a local mapping, in place: a typed range, then the region's offset.
	local, err := ctx.Allocate(64)
	if err != nil {
		log.Fatal(err)
	}
	defer local.Close()
	lb, err := local.Bytes()
	if err != nil {
		log.Fatal(err)
	}
	copy(lb, "from a local mapping")
	req, err := region.PutMem(local.Range(0, 20), 2000)
	if err != nil {
		log.Fatal(err)
	}
	if err := req.Wait(wait); err != nil {
		log.Fatal(err)
	}
	if err := region.Flush(wait); err != nil { // a completed put is in the host's memory once flushed
		log.Fatal(err)
	}
	got = make([]byte, 20)
	if _, err := region.ReadAtContext(wait, got, 2000); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(got))
	// Output:
	// written by the DPU
	// from a local mapping
}

// A worker that waits for work takes it from a queue, with a deadline,
// instead of being called with it.
func ExampleAMQueue() {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", "posix,sysv,self"))
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	server, err := ctx.NewWorker()
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()
	const jobs ucp.AMID = 1
	q, err := server.OpenAMQueue(jobs)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	client, err := ctx.NewWorker()
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	addr, err := server.PackAddress()
	if err != nil {
		log.Fatal(err)
	}
	// The sender's worker is progressed by Run: a send it does not wait
	// for completes only in its worker's progress.
	run, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- client.Run(run) }()
	defer func() { stop(); <-ran }()
	ep, err := client.ConnectWorker(addr, ucp.WithPeerErrorHandling(false))
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close(context.Background(), ucp.CloseForce)
	req, err := ep.SendAM(jobs, []byte("job"), []byte("payload"), 0)
	if err != nil {
		log.Fatal(err)
	}
	req.Detach() // the sender does not wait for it; Run completes it

	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := q.Receive(wait)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n", m.Header, m.Data)
	// Output: job: payload
}
