package bench

// LocalRegion: what making one costs, what its parts cost (the loopback
// endpoint, the key), and get/put through it. Run with
// `go test ./bench -run '^$' -bench LocalRegion -benchmem`; the results
// are in docs/localregion.md. Not part of run.sh's table: the C twin has
// no counterpart.

import (
	"context"
	"testing"

	"github.com/ucxgo/ucx/ucp"
)

// The transports the rows run on: shared memory and self only (as the
// other one-process rows), and UCX's default (tcp and cma too).
var localTLS = []struct{ name, tls string }{{"shm", "posix,sysv,self"}, {"default", ""}}

func localContext(b *testing.B, tls string) *ucp.Context {
	var opts []ucp.ContextOption
	if tls != "" {
		opts = append(opts, ucp.WithConfig("TLS", tls))
	}
	ctx, err := ucp.NewContext(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ctx.Close() })
	return ctx
}

func localWorker(b *testing.B, ctx *ucp.Context) *ucp.Worker {
	w, err := ctx.NewWorker(clientSpin)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	return w
}

func eachTLS(b *testing.B, f func(b *testing.B, ctx *ucp.Context)) {
	for _, c := range localTLS {
		b.Run(c.name, func(b *testing.B) { f(b, localContext(b, c.tls)) })
	}
}

// BenchmarkLocalRegionCreate makes a LocalRegion of a 64 KiB mapping and
// closes it: what an importer pays per mapping it reaches.
func BenchmarkLocalRegionCreate(b *testing.B) {
	eachTLS(b, func(b *testing.B, ctx *ucp.Context) {
		w := localWorker(b, ctx)
		m := mapped(b, ctx, 64<<10)
		bg := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			lr, err := w.LocalRegion(bg, m)
			if err != nil {
				b.Fatal(err)
			}
			if err := lr.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLocalRegionCreateMapping is Create with the mapping made and
// closed in the loop too: the importer's whole cycle (map, reach, close),
// which the unmap quarantine must not grow.
func BenchmarkLocalRegionCreateMapping(b *testing.B) {
	eachTLS(b, func(b *testing.B, ctx *ucp.Context) {
		w := localWorker(b, ctx)
		bg := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			m, err := ctx.Allocate(64 << 10)
			if err != nil {
				b.Fatal(err)
			}
			lr, err := w.LocalRegion(bg, m)
			if err != nil {
				b.Fatal(err)
			}
			if err := lr.Close(); err != nil {
				b.Fatal(err)
			}
			m.Close()
		}
	})
}

// BenchmarkLocalRegionCreateParallel is Create from GOMAXPROCS goroutines
// on one worker, each with its own mapping.
func BenchmarkLocalRegionCreateParallel(b *testing.B) {
	eachTLS(b, func(b *testing.B, ctx *ucp.Context) {
		w := localWorker(b, ctx)
		bg := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			m, err := ctx.Allocate(64 << 10)
			if err != nil {
				b.Error(err)
				return
			}
			defer m.Close()
			for pb.Next() {
				lr, err := w.LocalRegion(bg, m)
				if err != nil {
					b.Error(err)
					return
				}
				if err := lr.Close(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkLocalRegionLoopback measures the parts a LocalRegion can be made
// of, through the public API: the worker's address, a loopback endpoint
// made and closed (one per region), and a key packed and unpacked on a
// loopback endpoint that lives on (one endpoint per worker).
func BenchmarkLocalRegionLoopback(b *testing.B) {
	eachTLS(b, func(b *testing.B, ctx *ucp.Context) {
		w := localWorker(b, ctx)
		m := mapped(b, ctx, 64<<10)
		bg := context.Background()
		addr, err := w.PackAddress()
		if err != nil {
			b.Fatal(err)
		}
		b.Run("PackAddress", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.PackAddress(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("EndpointConnectClose", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ep, err := w.ConnectWorker(addr, ucp.WithPeerErrorHandling(false))
				if err != nil {
					b.Fatal(err)
				}
				if err := ep.Close(bg, ucp.CloseFlush); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("KeyOnSharedEndpoint", func(b *testing.B) {
			ep, err := w.ConnectWorker(addr, ucp.WithPeerErrorHandling(false))
			if err != nil {
				b.Fatal(err)
			}
			defer ep.Close(bg, ucp.CloseFlush)
			b.ReportAllocs()
			for b.Loop() {
				packed, err := m.PackRemoteKey()
				if err != nil {
					b.Fatal(err)
				}
				rk, err := ep.UnpackRemoteKey(bg, packed)
				if err != nil {
					b.Fatal(err)
				}
				rk.Close()
				if err := ep.Flush(bg); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// localPair is a LocalRegion of a mapping (the far side, as an imported
// mapping would be) and a local mapping to move bytes to and from.
func localPair(b *testing.B, ctx *ucp.Context, n int) (*ucp.LocalRegion, *ucp.Mem) {
	w := localWorker(b, ctx)
	far := mapped(b, ctx, n)
	near := mapped(b, ctx, n)
	lr, err := w.LocalRegion(context.Background(), far)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lr.Close() })
	return lr, near
}

// BenchmarkLocalRegionGet8 is an 8-byte GetMem through a LocalRegion.
func BenchmarkLocalRegionGet8(b *testing.B) {
	eachTLS(b, func(b *testing.B, ctx *ucp.Context) {
		lr, near := localPair(b, ctx, 4096)
		bg := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			req, err := lr.GetMem(near.Range(0, 8), 0)
			if err != nil {
				b.Fatal(err)
			}
			if err := req.Wait(bg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLocalRegionPut8Flush is an 8-byte PutMem and a flush.
func BenchmarkLocalRegionPut8Flush(b *testing.B) {
	eachTLS(b, func(b *testing.B, ctx *ucp.Context) {
		lr, near := localPair(b, ctx, 4096)
		bg := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			req, err := lr.PutMem(near.Range(0, 8), 0)
			if err != nil {
				b.Fatal(err)
			}
			if err := req.Wait(bg); err != nil {
				b.Fatal(err)
			}
			if err := lr.Flush(bg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchLocalBW(b *testing.B, n int, put bool) {
	eachTLS(b, func(b *testing.B, ctx *ucp.Context) {
		lr, near := localPair(b, ctx, n)
		bg := context.Background()
		b.SetBytes(int64(n))
		b.ReportAllocs()
		for b.Loop() {
			var req ucp.Request
			var err error
			if put {
				req, err = lr.PutMem(near.Range(0, n), 0)
			} else {
				req, err = lr.GetMem(near.Range(0, n), 0)
			}
			if err != nil {
				b.Fatal(err)
			}
			if err := req.Wait(bg); err != nil {
				b.Fatal(err)
			}
		}
		if put {
			lr.Flush(bg)
		}
	})
}

func BenchmarkLocalRegionPut64K(b *testing.B) { benchLocalBW(b, 64<<10, true) }
func BenchmarkLocalRegionPut1M(b *testing.B)  { benchLocalBW(b, 1<<20, true) }
func BenchmarkLocalRegionGet64K(b *testing.B) { benchLocalBW(b, 64<<10, false) }
func BenchmarkLocalRegionGet1M(b *testing.B)  { benchLocalBW(b, 1<<20, false) }
