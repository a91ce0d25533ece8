package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ucxgo/ucx/examples/internal/demo"
	"github.com/ucxgo/ucx/ucp"
)

const fuzzRegion = 1 << 20 // -size 1 (MiB)

// FuzzVerifyRequest sends foreign AMVerify headers to a real exporter (its
// run function, over UCX on loopback) and checks each answer against the
// handler's contract: 1 only for a well-formed header whose length fits the
// region and whose pattern the region holds, else 0 with a reason. The
// exporter must answer every request and never crash.
func FuzzVerifyRequest(f *testing.F) {
	f.Add(demo.VerifyHeader(1, fuzzRegion))
	f.Add(demo.VerifyHeader(1, 0))
	f.Add(demo.VerifyHeader(2, 64))
	f.Add(demo.VerifyHeader(1, fuzzRegion+1))
	f.Add(demo.VerifyHeader(1, 1<<63))
	f.Add([]byte{})
	f.Add(make([]byte, 17))

	region := make([]byte, fuzzRegion)
	demo.Fill(region, 1) // what the exporter maps and fills
	addr, stopExporter := startFuzzExporter(f)
	results := make(chan []byte, 1)
	ep, closeImporter := connectFuzzImporter(f, addr, results)
	// The exporter stops first: its revoke finds the importer alive.
	f.Cleanup(func() { stopExporter(); closeImporter() })

	f.Fuzz(func(t *testing.T, h []byte) {
		req, err := ep.SendAM(demo.AMVerify, h, nil, ucp.AMReply)
		if err != nil {
			return // a header UCP itself refuses never reaches the exporter
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := req.Wait(ctx); err != nil {
			t.Fatalf("send: %v", err)
		}
		var got []byte
		select {
		case got = <-results:
		case <-ctx.Done():
			t.Fatalf("the exporter did not answer a %d-byte verify header", len(h))
		}
		want := byte(0)
		if seed, n, err := demo.ParseVerifyHeader(h); err == nil && n <= fuzzRegion && demo.Verify(region[:n], seed) == nil {
			want = 1
		}
		if len(got) != 1 || got[0] != want {
			t.Fatalf("header %x: answer %x, want %d", h, got, want)
		}
	})
}

// startFuzzExporter runs the exporter in rkey mode on 127.0.0.1 and returns
// its address and what stops it.
func startFuzzExporter(f *testing.F) (string, func()) {
	addrFile := filepath.Join(f.TempDir(), "addr")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{listen: "127.0.0.1:0", sizeMiB: fuzzRegion >> 20, source: "alloc", mode: "rkey",
			secret: []byte("fuzz"), lease: time.Hour, revokeTimeout: time.Second, addrFile: addrFile, json: true})
	}()
	stop := func() { cancel(); <-done }
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b)), stop
		}
		select {
		case err := <-done:
			f.Fatalf("the exporter stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	f.Fatal("the exporter did not listen within 30 s")
	return "", nil
}

// connectFuzzImporter connects an importer-side worker that passes the
// header of every AMResult to results; the func closes it.
func connectFuzzImporter(f *testing.F, addr string, results chan<- []byte) (*ucp.Endpoint, func()) {
	uctx, err := ucp.NewContext()
	if err != nil {
		f.Fatal(err)
	}
	w, err := uctx.NewWorker()
	if err != nil {
		f.Fatal(err)
	}
	err = w.SetAMHandler(demo.AMResult, func(m *ucp.AMMessage) { results <- append([]byte(nil), m.Header...) })
	if err != nil {
		f.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); w.Run(runCtx) }()
	ep, err := w.Connect(addr)
	if err != nil {
		f.Fatal(err)
	}
	return ep, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ep.Close(ctx, ucp.CloseForce)
		stop()
		<-runDone
		w.Close()
		uctx.Close()
	}
}
