package ucp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// The programs a newcomer writes first from the godoc, each on the
// transports a newcomer meets: UCX's default choice (shared memory here)
// and tcp.

// hostDPU is what a newcomer builds from the package doc: two contexts,
// the host Listens and Runs, the DPU Connects.
type hostDPU struct {
	hostCtx, dpuCtx *ucp.Context
	host, dpu       *ucp.Worker
	l               *ucp.Listener
	ep, hep         *ucp.Endpoint
	stopRun         func()
}

func newHostDPU(t *testing.T, run bool, ctxOpts []ucp.ContextOption, clientEP, serverEP []ucp.EndpointOption) *hostDPU {
	t.Helper()
	h := &hostDPU{}
	var err error
	h.hostCtx, err = ucp.NewContext(ctxOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { h.hostCtx.Close() })
	h.host, err = h.hostCtx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { h.host.Close() })
	h.l, err = h.host.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { h.l.Close() })
	h.dpuCtx, err = ucp.NewContext(ctxOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { h.dpuCtx.Close() })
	h.dpu, err = h.dpuCtx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { h.dpu.Close() })
	accepted := acceptOne(t, h.host, h.l, serverEP...)
	h.ep, err = h.dpu.Connect(waitCtx(t), h.l.Addr().String(), clientEP...)
	require.NoError(t, err)
	t.Cleanup(func() { closeEP(t, h.ep) }) // if accepted fails the test
	h.hep = accepted()
	t.Cleanup(func() { // both sides progressed: a force close first flushes (CloseForce)
		defer progressWhile(h.dpu)()
		defer progressWhile(h.host)() // its Run, if any, was stopped by a later cleanup
		closeEP(t, h.hep)
		closeEP(t, h.ep)
	})
	if run {
		r := startRun(h.host)
		h.stopRun = func() { r.stop() }
		t.Cleanup(h.stopRun)
	}
	return h
}

var reviewTLS = []string{"", "tcp"}

func reviewOpts(tls string, f ucp.Feature) []ucp.ContextOption {
	// FeatureAM always: on UCX 1.17 a listener connection needs it (Listen
	// and Connect refuse without, see TestListenerNeedsAMOn117).
	opts := []ucp.ContextOption{ucp.WithFeatures(f | ucp.FeatureAM)}
	if tls != "" {
		opts = append(opts, ucp.WithConfig("TLS", tls))
	}
	return opts
}

var noPeerErr = []ucp.EndpointOption{ucp.WithPeerErrorHandling(false)}

// sharedRegion is a host mapping of n bytes reached from the DPU's
// endpoint; closed when the test ends.
func (h *hostDPU) sharedRegion(t *testing.T, n int) (*ucp.Mem, ucp.RemoteRegion) {
	t.Helper()
	m, err := h.hostCtx.Allocate(n)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	packed, err := m.PackRegion()
	require.NoError(t, err)
	r, err := h.ep.UnpackRegion(waitCtx(t), packed)
	require.NoError(t, err)
	t.Cleanup(func() { r.Key().Close() })
	return m, r
}

// TestReviewNewcomerCounter: 8 goroutines count into one host word with
// FetchAdd64, then post Add32s and Flush; every old value is seen once.
func TestReviewNewcomerCounter(t *testing.T) {
	for _, tls := range reviewTLS {
		t.Run("tls="+tls, func(t *testing.T) {
			h := newHostDPU(t, true, reviewOpts(tls, ucp.FeatureRMA|ucp.FeatureAM|ucp.FeatureAMO32|ucp.FeatureAMO64), noPeerErr, noPeerErr)
			m, r := h.sharedRegion(t, 4096)
			const goroutines, each = 8, 100
			var mu sync.Mutex
			seen := map[uint64]bool{}
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var reqs []ucp.Request
					for range each {
						old, err := r.FetchAdd64(waitCtx(t), 64, 1)
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						assert.False(t, seen[old], "old value %d twice", old)
						seen[old] = true
						mu.Unlock()
						req, err := r.Add32(r.Len()-4, 2) // the region's last word
						if !assert.NoError(t, err) {
							return
						}
						reqs = append(reqs, req)
					}
					for _, req := range reqs {
						assert.NoError(t, req.Wait(waitCtx(t)))
					}
				}()
			}
			wg.Wait()
			require.NoError(t, r.Flush(waitCtx(t)))
			b, err := m.Bytes()
			require.NoError(t, err)
			assert.Equal(t, uint64(goroutines*each), binary.NativeEndian.Uint64(b[64:]))
			assert.Equal(t, uint32(2*goroutines*each), binary.NativeEndian.Uint32(b[len(b)-4:]))
			assert.Len(t, seen, goroutines*each)
		})
	}
}

// TestReviewNewcomerLock: a spin lock in the host's memory taken with
// CompareAndSwap64 and released with Swap64 guards a counter read with
// Get and written with Put (then Flush) from 4 goroutines.
func TestReviewNewcomerLock(t *testing.T) {
	for _, tls := range reviewTLS {
		t.Run("tls="+tls, func(t *testing.T) {
			h := newHostDPU(t, true, reviewOpts(tls, ucp.FeatureRMA|ucp.FeatureAM|ucp.FeatureAMO64), noPeerErr, noPeerErr)
			m, r := h.sharedRegion(t, 64)
			const lock, counter = 0, 8
			const goroutines, each = 4, 25
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := waitCtx(t)
					word := make([]byte, 8)
					for range each {
						for { // acquire
							prev, err := r.CompareAndSwap64(ctx, lock, 0, uint64(g+1))
							if !assert.NoError(t, err) {
								return
							}
							if prev == 0 {
								break
							}
						}
						_, err := r.ReadAtContext(ctx, word, counter)
						if !assert.NoError(t, err) {
							return
						}
						binary.NativeEndian.PutUint64(word, binary.NativeEndian.Uint64(word)+1)
						_, err = r.WriteAtContext(ctx, word, counter) // flushed
						if !assert.NoError(t, err) {
							return
						}
						prev, err := r.Swap64(ctx, lock, 0) // release
						if !assert.NoError(t, err) {
							return
						}
						assert.Equal(t, uint64(g+1), prev, "the lock was held by someone else")
					}
				}()
			}
			wg.Wait()
			b, err := m.Bytes()
			require.NoError(t, err)
			assert.Equal(t, uint64(goroutines*each), binary.NativeEndian.Uint64(b[counter:]))
			assert.Equal(t, uint64(0), binary.NativeEndian.Uint64(b[lock:]))
		})
	}
}

const (
	reqBit  ucp.Tag = 1 << 63
	respBit ucp.Tag = 1 << 62
)

// TestReviewNewcomerTagRPC: a server answers requests tagged
// reqBit|client<<32|seq with respBit|client<<32|seq; 4 client goroutines
// receive their own answers on one worker concurrently.
func TestReviewNewcomerTagRPC(t *testing.T) {
	for _, tls := range reviewTLS {
		t.Run("tls="+tls, func(t *testing.T) {
			h := newHostDPU(t, false, reviewOpts(tls, ucp.FeatureTag), nil, nil)
			srvCtx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { // the server: receive any request, answer in upper case
				buf := make([]byte, 256)
				for {
					info, err := h.host.RecvTag(srvCtx, buf, reqBit, reqBit)
					if err != nil {
						served <- err
						return
					}
					ans := bytes.ToUpper(buf[:info.Len])
					req, err := h.hep.SendTag(info.Tag&^reqBit|respBit, ans)
					if err == nil {
						err = req.Wait(srvCtx)
					}
					if err != nil {
						served <- err
						return
					}
				}
			}()
			const clients, each = 4, 50
			var wg sync.WaitGroup
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := waitCtx(t)
					buf := make([]byte, 256)
					for seq := range each {
						id := ucp.Tag(c)<<32 | ucp.Tag(seq)
						msg := fmt.Sprintf("client %d request %d", c, seq)
						req, err := h.ep.SendTag(reqBit|id, []byte(msg))
						if !assert.NoError(t, err) {
							return
						}
						info, err := h.dpu.RecvTag(ctx, buf, respBit|id, ^ucp.Tag(0))
						if !assert.NoError(t, err) {
							return
						}
						assert.NoError(t, req.Wait(ctx))
						assert.Equal(t, respBit|id, info.Tag)
						assert.Equal(t, bytes.ToUpper([]byte(msg)), buf[:info.Len])
					}
				}()
			}
			wg.Wait()
			stop()
			err := <-served
			assert.ErrorIs(t, err, ucs.ErrCanceled)
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
}

// TestReviewNewcomerStreamCopy: 1 MiB in 64 KiB sends, received in
// whatever pieces come, then the same through mappings (SendStreamMem,
// RecvStreamMem with StreamWaitAll).
func TestReviewNewcomerStreamCopy(t *testing.T) {
	for _, tls := range reviewTLS {
		t.Run("tls="+tls, func(t *testing.T) {
			h := newHostDPU(t, false, reviewOpts(tls, ucp.FeatureStream), nil, nil)
			const size, chunk = 1 << 20, 64 << 10
			want := pattern(size, 3)
			sent := make(chan error, 1)
			go func() {
				var reqs []ucp.Request
				for off := 0; off < size; off += chunk {
					req, err := h.ep.SendStream(want[off : off+chunk])
					if err != nil {
						sent <- err
						return
					}
					reqs = append(reqs, req)
				}
				for _, req := range reqs {
					if err := req.Wait(waitCtx(t)); err != nil {
						sent <- err
						return
					}
				}
				sent <- nil
			}()
			got := make([]byte, size)
			pieces := 0
			for n := 0; n < size; pieces++ {
				k, err := h.hep.RecvStream(waitCtx(t), got[n:], 0)
				require.NoError(t, err)
				require.Positive(t, k)
				n += k
			}
			require.NoError(t, <-sent)
			require.True(t, bytes.Equal(want, got))
			t.Logf("1 MiB in %d receives", pieces)

			src, err := h.dpuCtx.Allocate(size)
			require.NoError(t, err)
			defer src.Close()
			dst, err := h.hostCtx.Allocate(size)
			require.NoError(t, err)
			defer dst.Close()
			sb, _ := src.Bytes()
			copy(sb, pattern(size, 4))
			go func() {
				var reqs []ucp.Request
				for off := 0; off < size; off += chunk {
					req, err := h.ep.SendStreamMem(src.Range(off, chunk))
					if err != nil {
						sent <- err
						return
					}
					reqs = append(reqs, req)
				}
				for _, req := range reqs {
					if err := req.Wait(waitCtx(t)); err != nil {
						sent <- err
						return
					}
				}
				sent <- nil
			}()
			n, err := h.hep.RecvStreamMem(waitCtx(t), dst.Range(0, size), ucp.StreamWaitAll)
			require.NoError(t, err)
			require.Equal(t, size, n)
			require.NoError(t, <-sent)
			db, _ := dst.Bytes()
			require.True(t, bytes.Equal(pattern(size, 4), db))
		})
	}
}

// TestReviewNewcomerRequestCopies: a Request's copies waited for from two
// goroutines at once both see the outcome; one detached meanwhile ends
// the other's wait with ErrCanceled.
func TestReviewNewcomerRequestCopies(t *testing.T) {
	h := newHostDPU(t, false, reviewOpts("tcp", ucp.FeatureTag), nil, nil)
	big := pattern(1<<20, 5) // rendezvous: the send waits for the receive
	req, err := h.ep.SendTag(9, big)
	require.NoError(t, err)
	a, b := req, req
	errs := make(chan error, 2)
	for _, r := range []ucp.Request{a, b} {
		go func() { errs <- r.Wait(waitCtx(t)) }()
	}
	got := make([]byte, 1<<20)
	info, err := h.host.RecvTag(waitCtx(t), got, 9, ^ucp.Tag(0))
	require.NoError(t, err)
	assert.Equal(t, 1<<20, info.Len)
	assert.NoError(t, <-errs)
	assert.NoError(t, <-errs)
	assert.True(t, req.Done())
	assert.True(t, bytes.Equal(big, got))

	// Detach one copy while another waits.
	req, err = h.ep.SendTag(10, big)
	require.NoError(t, err)
	waiting := req
	go func() { errs <- waiting.Wait(waitCtx(t)) }()
	time.Sleep(20 * time.Millisecond)
	req.Detach()
	select {
	case err := <-errs:
		assert.ErrorIs(t, err, ucs.ErrCanceled)
	case <-time.After(5 * time.Second):
		t.Fatal("a Detach did not end a Wait on another copy")
	}
	assert.False(t, waiting.Done())
	// The detached send still delivers once the receive is posted and the
	// DPU's worker progresses.
	stop := progressWhile(h.dpu)
	defer stop()
	info, err = h.host.RecvTag(waitCtx(t), got, 10, ^ucp.Tag(0))
	require.NoError(t, err)
	assert.Equal(t, 1<<20, info.Len)
}

// TestReviewNewcomerCloseOrder: the order that comes to mind (context,
// then worker, then endpoint) with a receive waiting; every later call
// says closed.
func TestReviewNewcomerCloseOrder(t *testing.T) {
	h := newHostDPU(t, false, reviewOpts("tcp", ucp.FeatureTag|ucp.FeatureStream|ucp.FeatureAMO64), noPeerErr, noPeerErr)
	_, r := h.sharedRegion(t, 64)
	runWorker(t, h.host)
	tagDone := make(chan error, 1)
	go func() {
		_, err := h.dpu.RecvTag(waitCtx(t), make([]byte, 8), 1, ^ucp.Tag(0))
		tagDone <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, h.dpuCtx.Close())
	// The context's Close leaves its worker and endpoint working.
	_, err := r.FetchAdd64(waitCtx(t), 0, 1)
	assert.NoError(t, err, "after the context's Close")
	req, err := h.ep.SendTag(2, []byte("x"))
	assert.NoError(t, err, "after the context's Close")
	req.Detach()
	require.NoError(t, h.dpu.Close())
	select {
	case err := <-tagDone:
		assert.ErrorIs(t, err, ucs.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("RecvTag outlived its worker's Close")
	}
	_, err = h.dpu.RecvTag(waitCtx(t), make([]byte, 8), 1, 1)
	assert.ErrorIs(t, err, ucs.ErrClosed)
	_, _, err = h.dpu.ProbeTag(1, 1)
	assert.ErrorIs(t, err, ucs.ErrClosed)
	// The endpoint of a closed worker is still open.
	_, err = r.FetchAdd64(waitCtx(t), 0, 1)
	t.Logf("FetchAdd64 on a closed worker's endpoint: %v", err)
	req, err = h.ep.SendTag(3, []byte("y"))
	t.Logf("SendTag on a closed worker's endpoint: %v", err)
	if err == nil {
		t.Logf("its Wait: %v", req.Wait(waitCtx(t)))
	}
	require.NoError(t, h.ep.Close(waitCtx(t), ucp.CloseFlush))
	_, err = r.FetchAdd64(waitCtx(t), 0, 1)
	assert.ErrorIs(t, err, ucs.ErrClosed)
	_, err = h.ep.SendStream([]byte("x"))
	assert.ErrorIs(t, err, ucs.ErrClosed)
	_, err = h.ep.RecvStream(waitCtx(t), make([]byte, 1), 0)
	assert.ErrorIs(t, err, ucs.ErrClosed)
	require.NoError(t, r.Key().Close())
	_, err = r.Key().Region(r.Address(), 8)
	assert.ErrorIs(t, err, ucs.ErrClosed)
	_, err = r.Add64(0, 1)
	assert.True(t, errors.Is(err, ucs.ErrClosed), "%v", err)
}
