package ucp_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// TestAtomicsRaceTheirEndpointAndKeyClose: atomics enter neither their
// endpoint nor their key (the worker's lock guards both), so this is the
// test of that guard. Goroutines run every kind of atomic while the
// endpoint or the key is closed, over shared memory (atomics done within
// the call) and tcp (in flight): each returns a result or an error
// wrapping ErrClosed (or, for one in flight on a force-closed endpoint,
// ErrCanceled), never a crash; once Close has returned, every new atomic
// is refused with ErrClosed; the word counts exactly the adds that
// returned without error.
func TestAtomicsRaceTheirEndpointAndKeyClose(t *testing.T) {
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	for _, tls := range reviewTLS {
		for _, what := range []string{"endpoint", "key"} {
			t.Run("tls="+tls+"/"+what, func(t *testing.T) {
				for round := range rounds {
					raceAtomicsWithClose(t, tls, what, round)
				}
			})
		}
	}
}

func raceAtomicsWithClose(t *testing.T, tls, what string, round int) {
	h := newHostDPU(t, true, reviewOpts(tls, allFeatures), noPeerErr, noPeerErr)
	m, r := h.sharedRegion(t, 64)
	var added atomic.Uint64
	var wg sync.WaitGroup
	closed := make(chan struct{})
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var err error
				switch (g + i) % 4 {
				case 0:
					_, err = r.FetchAdd64(ctx, 0, 1)
					if err == nil {
						added.Add(1)
					}
				case 1:
					var req ucp.Request
					if req, err = r.Add64(0, 1); err == nil {
						if err = req.Wait(ctx); err == nil {
							added.Add(1)
						}
					}
				case 2:
					_, err = r.CompareAndSwap64(ctx, 8, 0, 0)
				default:
					_, err = r.Swap32(ctx, 16, uint32(i))
				}
				cancel()
				if err == nil {
					continue
				}
				wasClosed := false
				select {
				case <-closed:
					wasClosed = true
				default:
				}
				if !errors.Is(err, ucs.ErrClosed) && !errors.Is(err, ucs.ErrCanceled) {
					assert.Failf(t, "unexpected error", "round %d: %v", round, err)
					return
				}
				if wasClosed {
					// Close had returned: every new atomic is refused.
					_, err = r.FetchAdd64(context.Background(), 0, 1)
					assert.ErrorIs(t, err, ucs.ErrClosed, "round %d: an atomic after Close returned", round)
					return
				}
				if errors.Is(err, ucs.ErrClosed) {
					return
				}
			}
		}()
	}
	time.Sleep(time.Duration(5+round*7) * time.Millisecond)
	if what == "endpoint" {
		closeEP(t, h.ep)
	} else {
		require.NoError(t, r.Key().Close())
	}
	close(closed)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("round %d: atomics still running 20 s after the %s's Close", round, what)
	}
	if what == "key" {
		// Through the endpoint, still open, and a fresh key: flush what the
		// adds left in flight, then count them.
		packed, err := m.PackRegion()
		require.NoError(t, err)
		r2, err := h.ep.UnpackRegion(waitCtx(t), packed)
		require.NoError(t, err)
		defer r2.Key().Close()
		require.NoError(t, r2.Flush(waitCtx(t)))
		got, err := r2.FetchAdd64(waitCtx(t), 0, 0)
		require.NoError(t, err)
		assert.Equal(t, added.Load(), got, "round %d: the adds that returned without error", round)
	}
}
