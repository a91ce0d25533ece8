package ucp_test

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

const allFeatures = ucp.FeatureRMA | ucp.FeatureAM | ucp.FeatureTag | ucp.FeatureStream | ucp.FeatureAMO32 | ucp.FeatureAMO64

// TestReviewTagTooLarge: messages larger than every receive, eager and
// rendezvous, arrived before the receive or after it: each receive fails
// with ErrTruncated, the sender's request ends, and the next message is
// received intact.
func TestReviewTagTooLarge(t *testing.T) {
	for _, tls := range reviewTLS {
		t.Run("tls="+tls, func(t *testing.T) {
			var ep []ucp.EndpointOption
			if tls == "" {
				ep = noPeerErr
			}
			h := newHostDPU(t, false, reviewOpts(tls, allFeatures), ep, ep)
			runWorker(t, h.dpu) // the sender progresses (rendezvous)
			small := make([]byte, 4096)
			for _, n := range []int{4097, 16 << 10, 1 << 20} {
				for _, posted := range []bool{false, true} {
					tag := ucp.Tag(n)<<1 | map[bool]ucp.Tag{false: 0, true: 1}[posted]
					var send ucp.Request
					var err error
					if !posted {
						send, err = h.ep.SendTag(tag, pattern(n, 1))
						require.NoError(t, err)
						// arrived, unexpected, before the receive
						require.Eventually(t, func() bool {
							h.host.Progress()
							_, ok, _ := h.host.ProbeTag(tag, ^ucp.Tag(0))
							return ok
						}, 5*time.Second, time.Millisecond)
					} else {
						go func() {
							time.Sleep(20 * time.Millisecond)
							s, err := h.ep.SendTag(tag, pattern(n, 1))
							assert.NoError(t, err)
							s.Detach()
						}()
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					info, err := h.host.RecvTag(ctx, small, tag, ^ucp.Tag(0))
					cancel()
					assert.ErrorIs(t, err, ucs.ErrTruncated, "%d bytes into 4096, posted first %v: %+v", n, posted, info)
					t.Logf("%d bytes into 4096, receive posted first %v: %v", n, posted, err)
					if !posted {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						err := send.Wait(ctx)
						cancel()
						t.Logf("  its send: %v", err)
					}
					// The next message is received intact.
					s, err := h.ep.SendTag(1, []byte("next"))
					require.NoError(t, err)
					s.Detach()
					info, err = h.host.RecvTag(waitCtx(t), small, 1, ^ucp.Tag(0))
					require.NoError(t, err)
					require.Equal(t, "next", string(small[:info.Len]))
					_, ok, err := h.host.ProbeTag(tag, ^ucp.Tag(0))
					require.NoError(t, err)
					require.False(t, ok, "the truncated message is gone")
				}
			}
			// Into a mapping too.
			m, err := h.hostCtx.Allocate(4096)
			require.NoError(t, err)
			defer m.Close()
			s, err := h.ep.SendTag(2, pattern(1<<20, 2))
			require.NoError(t, err)
			s.Detach()
			_, err = h.host.RecvTagMem(waitCtx(t), m.Range(0, 4096), 2, ^ucp.Tag(0))
			assert.ErrorIs(t, err, ucs.ErrTruncated)
		})
	}
}

// TestReviewZeroBytes: sends of 0 bytes on tags and streams, from slices
// and from empty ranges; a zero-length mapping's range.
func TestReviewZeroBytes(t *testing.T) {
	h := newHostDPU(t, true, reviewOpts("tcp", allFeatures), nil, nil)
	empty, err := h.dpuCtx.Allocate(0)
	require.NoError(t, err)
	defer empty.Close()
	some, err := h.dpuCtx.Allocate(64)
	require.NoError(t, err)
	defer some.Close()
	for i, src := range []func() (ucp.Request, error){
		func() (ucp.Request, error) { return h.ep.SendTag(7, nil) },
		func() (ucp.Request, error) { return h.ep.SendTag(7, []byte{}) },
		func() (ucp.Request, error) { return h.ep.SendTagMem(7, some.Range(64, 0)) },
		func() (ucp.Request, error) { return h.ep.SendTagMem(7, empty.Range(0, 0)) },
	} {
		req, err := src()
		require.NoError(t, err, "send %d", i)
		require.NoError(t, req.Wait(waitCtx(t)), "send %d", i)
		buf := []byte("untouched")
		info, err := h.host.RecvTag(waitCtx(t), buf, 7, ^ucp.Tag(0))
		require.NoError(t, err, "send %d", i)
		assert.Equal(t, ucp.TagInfo{Tag: 7}, info)
		assert.Equal(t, "untouched", string(buf))
	}
	// Streams: an empty send is not made here: one that arrives before
	// a receive is posted aborts the receiving process
	// (TestReviewEmptyStreamSend).
	req, err := h.ep.SendStream([]byte("abc"))
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	buf := make([]byte, 3)
	n, err := h.hep.RecvStream(waitCtx(t), buf, ucp.StreamWaitAll)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(buf[:n]))
	_, err = h.hep.RecvStreamMem(waitCtx(t), empty.Range(0, 0), 0)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam)
	hsome, err := h.hostCtx.Allocate(64) // the host's calls take the host's mappings
	require.NoError(t, err)
	defer hsome.Close()
	_, err = h.hep.RecvStreamMem(waitCtx(t), hsome.Range(hsome.Len()-4, 8), 0)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange)
	_, err = h.host.RecvTagMem(waitCtx(t), hsome.Range(-1, 8), 0, 0)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange)
	_, err = h.host.RecvTagMem(waitCtx(t), some.Range(0, 8), 0, 0)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam, "a mapping of the DPU's context")
	_, err = h.host.RecvTagMem(waitCtx(t), ucp.MemRange{}, 0, 0)
	t.Logf("RecvTagMem into the zero MemRange: %v", err)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam)
	_, err = h.ep.SendTagMem(0, ucp.MemRange{})
	assert.ErrorIs(t, err, ucs.ErrInvalidParam)
}

// TestReviewPeerClosesWhileBlocked: the peer closes its endpoint while
// this side waits in RecvStream (on that endpoint) and RecvTag (on the
// worker): how long until each returns, and with what.
func TestReviewPeerClosesWhileBlocked(t *testing.T) {
	for _, tc := range []struct {
		name, tls string
		peerErr   bool
		mode      ucp.CloseMode
	}{
		{"tcp-peererr-flush", "tcp", true, ucp.CloseFlush},
		{"tcp-peererr-force", "tcp", true, ucp.CloseForce},
		{"tcp-nopeererr-flush", "tcp", false, ucp.CloseFlush},
		{"shm-nopeererr-flush", "", false, ucp.CloseFlush},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eo := []ucp.EndpointOption{ucp.WithPeerErrorHandling(tc.peerErr)}
			h := newHostDPU(t, false, reviewOpts(tc.tls, allFeatures), eo, eo)
			runWorker(t, h.dpu)
			type result struct {
				what string
				err  error
				took time.Duration
			}
			results := make(chan result, 2)
			var closedAt atomic.Int64
			since := func() time.Duration { return time.Duration(time.Now().UnixNano() - closedAt.Load()) }
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			go func() {
				_, err := h.hep.RecvStream(ctx, make([]byte, 8), 0)
				results <- result{"RecvStream", err, since()}
			}()
			go func() {
				_, err := h.host.RecvTag(ctx, make([]byte, 8), 1, ^ucp.Tag(0))
				results <- result{"RecvTag", err, since()}
			}()
			time.Sleep(50 * time.Millisecond)
			closedAt.Store(time.Now().UnixNano())
			cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := h.ep.Close(cctx, tc.mode)
			ccancel()
			t.Logf("peer's Close: %v", err)
			for range 2 {
				r := <-results
				t.Logf("%s returned %v after the peer's close: %v", r.what, r.took.Round(time.Millisecond), r.err)
				if r.what == "RecvStream" && tc.peerErr {
					assert.NotErrorIs(t, r.err, ucs.ErrTimedOut)
				}
			}
			if tc.peerErr {
				select {
				case <-h.hep.Failed():
					t.Logf("the endpoint failed: %v", h.hep.Err())
				default:
					t.Logf("the endpoint has not failed")
				}
				_, err := h.hep.RecvStream(waitCtx(t), make([]byte, 8), 0)
				t.Logf("RecvStream after: %v", err)
			}
		})
	}
}

// TestReviewAtomicEdges: the last word of a region, past it, across its
// end, misaligned; a region of a bounded key at a huge address.
func TestReviewAtomicEdges(t *testing.T) {
	h := newHostDPU(t, true, reviewOpts("tcp", allFeatures), noPeerErr, noPeerErr)
	m, r := h.sharedRegion(t, 4096)
	ctx := waitCtx(t)
	n := r.Len()
	t.Logf("Allocate(4096) region of %d bytes at %#x", n, r.Address())
	_, err := r.FetchAdd64(ctx, n-8, 1)
	require.NoError(t, err)
	_, err = r.FetchAdd32(ctx, n-4, 1)
	require.NoError(t, err)
	b, _ := m.Bytes()
	assert.Equal(t, uint64(1|1<<32), binary.NativeEndian.Uint64(b[n-8:]))
	for _, off := range []int{n, n - 4, n + 8, 1 << 40, -8} {
		_, err = r.FetchAdd64(ctx, off, 1)
		assert.ErrorIs(t, err, ucs.ErrOutOfRange, "64-bit at %d", off)
	}
	for _, off := range []int{n, n - 2, -4} {
		_, err = r.Swap32(ctx, off, 1)
		assert.ErrorIs(t, err, ucs.ErrOutOfRange, "32-bit at %d", off)
	}
	for _, off := range []int{1, 2, 3, 4, 5, 6, 7} {
		_, err = r.CompareAndSwap64(ctx, off, 0, 1)
		assert.ErrorIs(t, err, ucs.ErrInvalidParam, "64-bit at %d", off)
	}
	for _, off := range []int{1, 2, 3} {
		_, err = r.Add32(off, 1)
		assert.ErrorIs(t, err, ucs.ErrInvalidParam, "32-bit at %d", off)
	}
	// A bounded key (UnpackRegion) refuses regions outside the mapping.
	for _, base := range []uint64{0, ^uint64(0) - 7, 1 << 62, r.Address() + uint64(n)} {
		_, err = r.Key().Region(base, 8)
		assert.ErrorIs(t, err, ucs.ErrOutOfRange, "bounded key at %#x", base)
	}
	_, err = r.Key().Region(r.Address(), n+1)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange)
	_, err = r.Sub(n-8, 16)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange)
	assert.Equal(t, make([]byte, n-8), b[:n-8], "nothing else changed")
}

// TestReviewConcurrentRecvTag: 6 goroutines receive on one worker with
// overlapping masks and short deadlines (each receive races a cancel)
// while a peer sends 2000 messages; every message is received once, with
// its own bytes.
func TestReviewConcurrentRecvTag(t *testing.T) {
	for _, tls := range reviewTLS {
		t.Run("tls="+tls, func(t *testing.T) {
			var eo []ucp.EndpointOption
			if tls == "" {
				eo = noPeerErr
			}
			h := newHostDPU(t, false, reviewOpts(tls, ucp.FeatureTag), eo, eo)
			const msgs = 2000
			sizes := []int{8, 200, 5000, 70000} // eager and rendezvous
			sent := make(chan error, 1)
			go func() {
				var reqs []ucp.Request
				for i := range msgs {
					b := make([]byte, sizes[i%len(sizes)])
					binary.LittleEndian.PutUint32(b, uint32(i))
					req, err := h.ep.SendTag(ucp.Tag(i), b)
					if err != nil {
						sent <- err
						return
					}
					reqs = append(reqs, req)
					if len(reqs) == 64 {
						for _, r := range reqs {
							if err := r.Wait(waitCtx(t)); err != nil {
								sent <- err
								return
							}
						}
						reqs = reqs[:0]
					}
				}
				for _, r := range reqs {
					if err := r.Wait(waitCtx(t)); err != nil {
						sent <- err
						return
					}
				}
				sent <- nil
			}()
			masks := []struct{ tag, mask ucp.Tag }{
				{0, 0},     // any
				{0, 1},     // even
				{1, 1},     // odd
				{0, 3},     // multiples of 4
				{2, 3},     // 2 mod 4
				{0, 0xf00}, // below 256 mod 4096
			}
			var got [msgs]atomic.Int32
			var total, cancelled, matchedLate atomic.Int32
			var wg sync.WaitGroup
			deadline := time.Now().Add(8 * time.Second)
			for g, m := range masks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 70000)
					for total.Load() < msgs && time.Now().Before(deadline) {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+g)*time.Millisecond)
						info, err := h.host.RecvTag(ctx, buf, m.tag, m.mask)
						late := ctx.Err() != nil
						cancel()
						if err != nil {
							if !assert.ErrorIs(t, err, ucs.ErrTimedOut) {
								return
							}
							assert.Contains(t, err.Error(), "cancelled", "a receive left pinned")
							cancelled.Add(1)
							continue
						}
						if late {
							matchedLate.Add(1)
						}
						i := int(info.Tag)
						if !assert.Less(t, i, msgs) || !assert.Equal(t, info.Tag&m.mask, m.tag&m.mask, "mask") {
							return
						}
						assert.Equal(t, sizes[i%len(sizes)], info.Len, "message %d", i)
						assert.Equal(t, uint32(i), binary.LittleEndian.Uint32(buf), "message %d's bytes", i)
						got[i].Add(1)
						total.Add(1)
					}
				}()
			}
			wg.Wait()
			require.NoError(t, <-sent)
			missing := 0
			for i := range got {
				if c := got[i].Load(); c != 1 {
					if c == 0 {
						missing++
					} else {
						t.Errorf("message %d received %d times", i, c)
					}
				}
			}
			assert.Zero(t, missing, "messages never received")
			t.Logf("%d received, %d receives cancelled, %d matched while their ctx ended", total.Load(), cancelled.Load(), matchedLate.Load())
		})
	}
}

// TestReviewFetchAddKeyClosedMidway: 8 goroutines FetchAdd while the key
// is closed: each returns a value or ErrClosed, and the word counts
// exactly the operations that returned a value.
func TestReviewFetchAddKeyClosedMidway(t *testing.T) {
	for _, tls := range reviewTLS {
		t.Run("tls="+tls, func(t *testing.T) {
			h := newHostDPU(t, true, reviewOpts(tls, allFeatures), noPeerErr, noPeerErr)
			m, r := h.sharedRegion(t, 64)
			var ok, closed atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := 0; ; i++ {
						var err error
						if (g+i)%3 == 0 {
							var req ucp.Request
							req, err = r.Add64(0, 1)
							if err == nil {
								err = req.Wait(waitCtx(t))
							}
						} else {
							_, err = r.FetchAdd64(waitCtx(t), 0, 1)
						}
						if err != nil {
							if !assert.ErrorIs(t, err, ucs.ErrClosed) {
								return
							}
							closed.Add(1)
							return
						}
						ok.Add(1)
					}
				}()
			}
			close(start)
			time.Sleep(30 * time.Millisecond)
			require.NoError(t, r.Key().Close())
			wg.Wait()
			// Reach the word again through a fresh key to flush the adds.
			packed, err := m.PackRegion()
			require.NoError(t, err)
			r2, err := h.ep.UnpackRegion(waitCtx(t), packed)
			require.NoError(t, err)
			defer r2.Key().Close()
			require.NoError(t, r2.Flush(waitCtx(t)))
			b, _ := m.Bytes()
			assert.Equal(t, uint64(ok.Load()), binary.NativeEndian.Uint64(b))
			assert.Equal(t, int64(8), closed.Load())
			t.Logf("%d atomics before the key's Close", ok.Load())
		})
	}
}

// TestReviewAtomicsWhileClosing: 8 goroutines FetchAdd while the
// endpoint is force-closed, then the worker: no hang, errors say why.
func TestReviewAtomicsWhileClosing(t *testing.T) {
	for _, what := range []string{"endpoint", "worker"} {
		t.Run(what, func(t *testing.T) {
			h := newHostDPU(t, true, reviewOpts("tcp", allFeatures), noPeerErr, noPeerErr)
			_, r := h.sharedRegion(t, 64)
			var wg sync.WaitGroup
			var mu sync.Mutex
			errsSeen := map[string]int{}
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						_, err := r.FetchAdd64(ctx, 0, 1)
						cancel()
						if err != nil {
							mu.Lock()
							errsSeen[err.Error()]++
							mu.Unlock()
							return
						}
					}
				}()
			}
			time.Sleep(30 * time.Millisecond)
			start := time.Now()
			if what == "endpoint" {
				closeEP(t, h.ep)
			} else {
				require.NoError(t, h.dpu.Close())
				// A closed worker's endpoints keep working (see Close):
				// end them too.
				time.Sleep(30 * time.Millisecond)
				closeEP(t, h.ep)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(8 * time.Second):
				t.Fatal("HANG: atomics outlived the close")
			}
			t.Logf("all ended %v after the close began: %v", time.Since(start).Round(time.Millisecond), errsSeen)
		})
	}
}

// TestReviewFetchReplies: goroutines mix FetchAdd64 on one word with
// CompareAndSwap64 and Swap64 on others over tcp (requests in flight):
// every FetchAdd's old value is seen once, whatever the other atomics
// write into their operands meanwhile.
func TestReviewFetchReplies(t *testing.T) {
	h := newHostDPU(t, true, reviewOpts("tcp", allFeatures), noPeerErr, noPeerErr)
	_, r := h.sharedRegion(t, 4096)
	const goroutines, each = 8, 300
	var mu sync.Mutex
	seen := map[uint64]int{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := waitCtx(t)
			for i := range each {
				switch (g + i) % 3 {
				case 0:
					old, err := r.FetchAdd64(ctx, 0, 1)
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					seen[old]++
					mu.Unlock()
				case 1:
					// never swaps (the word holds g's own marker or 0)
					prev, err := r.CompareAndSwap64(ctx, 64+8*g, 0xdead_0000_0000_0000, 0xbad)
					if !assert.NoError(t, err) {
						return
					}
					assert.Contains(t, []uint64{0, uint64(g) << 32}, prev)
				case 2:
					prev, err := r.Swap64(ctx, 64+8*g, uint64(g)<<32)
					if !assert.NoError(t, err) {
						return
					}
					assert.Contains(t, []uint64{0, uint64(g) << 32}, prev)
				}
			}
		}()
	}
	wg.Wait()
	var n int
	for v, c := range seen {
		if c != 1 {
			t.Errorf("FetchAdd64 returned old value %#x %d times", v, c)
		}
		n += c
	}
	final, err := r.FetchAdd64(waitCtx(t), 0, 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(n), final)
	for v := range seen {
		assert.Less(t, v, final, "an old value never held: %#x", v)
	}
}
