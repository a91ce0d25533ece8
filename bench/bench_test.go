// Package bench measures ucx-go against a C program making the same UCX
// calls with the same parameters (ctwin/twin.c); run.sh runs both
// alternately and prints the table. See README.md.
package bench

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// The configuration both sides use: one context, shared memory transports.
func newContext(b *testing.B) *ucp.Context {
	// Atomics too, as the C twin's context: every row pays for the same
	// features.
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", "posix,sysv,self"),
		ucp.WithFeatures(ucp.FeatureRMA|ucp.FeatureAM|ucp.FeatureAMO64|ucp.FeatureTag|ucp.FeatureStream))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ctx.Close() })
	return ctx
}

func benchRegister(b *testing.B, n int) {
	ctx := newContext(b)
	buf := make([]byte, n)
	b.ReportAllocs()
	for b.Loop() {
		m, err := ctx.Register(buf)
		if err != nil {
			b.Fatal(err)
		}
		m.Close()
	}
}

func BenchmarkRegister64K(b *testing.B) { benchRegister(b, 64<<10) }
func BenchmarkRegister4M(b *testing.B)  { benchRegister(b, 4<<20) }

func BenchmarkAlloc64K(b *testing.B) {
	ctx := newContext(b)
	b.ReportAllocs()
	for b.Loop() {
		m, err := ctx.Allocate(64 << 10)
		if err != nil {
			b.Fatal(err)
		}
		m.Close()
	}
}

func mapped(b *testing.B, ctx *ucp.Context, n int) *ucp.Mem {
	m, err := ctx.Allocate(n)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func BenchmarkRkeyPack(b *testing.B) {
	m := mapped(b, newContext(b), 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.PackRemoteKey(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExportAttempt(b *testing.B) {
	m := mapped(b, newContext(b), 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		m.Export() // unsupported where no MD can export: the error path
	}
}

func BenchmarkZeroExportImport(b *testing.B) {
	ctx := newContext(b)
	m := mapped(b, ctx, 0)
	dummy := []byte{0, 0, 0} // what UCX packs for a zero-length mapping
	b.ReportAllocs()
	for b.Loop() {
		desc, err := m.Export()
		if errors.Is(err, ucs.ErrUnsupported) {
			// No memory domain here can export, so neither does a
			// zero-length mapping: import UCX's dummy all the same.
			desc, err = dummy, nil
		}
		if err != nil {
			b.Fatal(err)
		}
		d, err := ucp.ParseDescriptor(desc)
		if err != nil {
			b.Fatal(err)
		}
		imp, err := ctx.Import(d)
		if err != nil {
			b.Fatal(err)
		}
		imp.Close()
	}
}

func BenchmarkUCTRegisterPack(b *testing.B) {
	md, err := uct.OpenMD("self")
	if err != nil {
		b.Fatal(err)
	}
	defer md.Close()
	buf := make([]byte, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		mem, err := md.Register(buf, uct.MemAccessAll)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := mem.PackRemoteKey(); err != nil {
			b.Fatal(err)
		}
		mem.Close()
	}
}

// clientSpin makes the client's waits busy-poll, as the C twin's client
// loops on ucp_worker_progress; targets keep the default spin and sleep, as
// the twin's target thread does.
var clientSpin = ucp.WithSpin(time.Hour)

// pair is a client worker with an endpoint to a server worker of the same
// context; the server is progressed by a goroutine.
type pair struct {
	ctx    *ucp.Context
	client *ucp.Worker
	ep     *ucp.Endpoint
	target *ucp.Mem
	rkey   *ucp.RemoteKey
	rr     ucp.RemoteRegion // the target through rkey
	local  *ucp.Mem
}

func newPair(b *testing.B, size int) *pair {
	ctx := newContext(b)
	client, err := ctx.NewWorker(clientSpin)
	if err != nil {
		b.Fatal(err)
	}
	server, err := ctx.NewWorker()
	if err != nil {
		b.Fatal(err)
	}
	run, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); server.Run(run) }()
	addr, _ := server.PackAddress()
	ep, err := client.ConnectWorker(addr, ucp.WithPeerErrorHandling(false))
	if err != nil {
		b.Fatal(err)
	}
	p := &pair{ctx: ctx, client: client, ep: ep, target: mapped(b, ctx, size), local: mapped(b, ctx, size)}
	packed, _ := p.target.PackRemoteKey()
	if p.rkey, err = ep.UnpackRemoteKey(context.Background(), packed); err != nil {
		b.Fatal(err)
	}
	if p.rr, err = p.rkey.Region(p.target.Address(), size); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		p.rkey.Close()
		ep.Close(context.Background(), ucp.CloseForce)
		stop()
		<-done
		server.Close()
		client.Close()
	})
	return p
}

// BenchmarkRkeyUnpack unpacks a shared-memory key (checked and padded in
// Go first) and destroys it.
func BenchmarkRkeyUnpack(b *testing.B) {
	p := newPair(b, 4096)
	packed, err := p.target.PackRemoteKey()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rk, err := p.ep.UnpackRemoteKey(context.Background(), packed)
		if err != nil {
			b.Fatal(err)
		}
		rk.Close()
	}
}

func BenchmarkPut8Flush(b *testing.B) {
	p := newPair(b, 4096)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		req, err := p.rr.PutMem(p.local.Range(0, 8), 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := req.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if err := p.ep.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// echoPair is a client and a server worker of one context, connected both
// ways by address (no peer error handling, as the C twin's), both
// busy-polling as the twin's threads do; serve runs the server's answers
// in a goroutine until the returned func is called.
type echoPair struct {
	client, server *ucp.Worker
	ep, sep        *ucp.Endpoint
}

func newEchoPair(b *testing.B) *echoPair {
	ctx := newContext(b)
	p := &echoPair{}
	var err error
	if p.client, err = ctx.NewWorker(clientSpin); err != nil {
		b.Fatal(err)
	}
	if p.server, err = ctx.NewWorker(clientSpin); err != nil {
		b.Fatal(err)
	}
	saddr, _ := p.server.PackAddress()
	caddr, _ := p.client.PackAddress()
	if p.ep, err = p.client.ConnectWorker(saddr, ucp.WithPeerErrorHandling(false)); err != nil {
		b.Fatal(err)
	}
	if p.sep, err = p.server.ConnectWorker(caddr, ucp.WithPeerErrorHandling(false)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		p.ep.Close(context.Background(), ucp.CloseForce)
		p.sep.Close(context.Background(), ucp.CloseForce)
		p.server.Close()
		p.client.Close()
	})
	return p
}

// serve answers until a message of tag 3 (tag mode) or the stream's end
// marker comes; the func it returns sends that and waits for the server.
func (p *echoPair) serve(b *testing.B, stream bool) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		buf := make([]byte, 64<<10)
		for {
			if stream {
				if _, err := p.sep.RecvStream(ctx, buf, ucp.StreamWaitAll); err != nil || buf[0] == 0xff {
					return
				}
				if req, err := p.sep.SendStream(buf[:8]); err != nil || req.Wait(ctx) != nil {
					return
				}
				continue
			}
			info, err := p.server.RecvTag(ctx, buf[:8], 0, 0)
			if err != nil || info.Tag == 3 {
				return
			}
			if req, err := p.sep.SendTag(2, buf[:8]); err != nil || req.Wait(ctx) != nil {
				return
			}
		}
	}()
	return func() {
		var req ucp.Request
		if stream {
			end := make([]byte, 64<<10)
			end[0] = 0xff
			req, _ = p.ep.SendStream(end)
		} else {
			req, _ = p.ep.SendTag(3, make([]byte, 8))
		}
		req.Wait(context.Background())
		<-done
	}
}

// BenchmarkTagPingPong8 is an 8-byte tagged message and its 8-byte answer.
func BenchmarkTagPingPong8(b *testing.B) {
	p := newEchoPair(b)
	stop := p.serve(b, false)
	defer stop()
	out, in := make([]byte, 8), make([]byte, 8)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		send, err := p.ep.SendTag(1, out)
		if err != nil {
			b.Fatal(err)
		}
		if err := send.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := p.client.RecvTag(ctx, in, 2, ^ucp.Tag(0)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStream64K is 64 KiB on a stream and its 8-byte answer.
func BenchmarkStream64K(b *testing.B) {
	p := newEchoPair(b)
	stop := p.serve(b, true)
	defer stop()
	out, in := make([]byte, 64<<10), make([]byte, 8)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		send, err := p.ep.SendStream(out)
		if err != nil {
			b.Fatal(err)
		}
		if err := send.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := p.ep.RecvStream(ctx, in, ucp.StreamWaitAll); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetchAdd8 is an 8-byte fetch-and-add, waited for.
func BenchmarkFetchAdd8(b *testing.B) {
	p := newPair(b, 4096)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.rr.FetchAdd64(ctx, 0, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet8(b *testing.B) {
	p := newPair(b, 4096)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		req, err := p.rr.GetMem(p.local.Range(0, 8), 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := req.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func benchBW(b *testing.B, n int, put bool) {
	p := newPair(b, n)
	ctx := context.Background()
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		var req ucp.Request
		var err error
		if put {
			req, err = p.rr.PutMem(p.local.Range(0, n), 0)
		} else {
			req, err = p.rr.GetMem(p.local.Range(0, n), 0)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := req.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if put {
		p.ep.Flush(ctx)
	}
}

func BenchmarkPut64K(b *testing.B) { benchBW(b, 64<<10, true) }
func BenchmarkPut1M(b *testing.B)  { benchBW(b, 1<<20, true) }
func BenchmarkPut4M(b *testing.B)  { benchBW(b, 4<<20, true) }
func BenchmarkGet64K(b *testing.B) { benchBW(b, 64<<10, false) }
func BenchmarkGet1M(b *testing.B)  { benchBW(b, 1<<20, false) }
func BenchmarkGet4M(b *testing.B)  { benchBW(b, 4<<20, false) }

// BenchmarkGet1MOneProcessor is Get1M with GOMAXPROCS=1: the busy-polling
// client and the goroutine running the target's worker share one
// processor, as in a service confined to one core. A spinning wait that
// never yields keeps the target's goroutine off it for a preemption slice
// (10 ms) per step. Go only (no C twin row); run it with go test -bench.
func BenchmarkGet1MOneProcessor(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	benchBW(b, 1<<20, false)
}

// BenchmarkCrossing is one empty cgo call, the floor under every row: the C
// twin's counterpart is a call through a function pointer.
func BenchmarkCrossing(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		cgo.Crossing()
	}
}

func BenchmarkProgressIdle(b *testing.B) {
	ctx := newContext(b)
	w, err := ctx.NewWorker()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ReportAllocs()
	for b.Loop() {
		w.Progress()
	}
}
