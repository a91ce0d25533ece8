package ucp_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// mappingAt is the line of /proc/self/maps that holds addr ("" if none):
// a mapping UCX allocated is in it until UCX unmaps it, and a range mapped
// again later has another line (another segment, another inode).
func mappingAt(t *testing.T, addr uint64) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps to see mappings in: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil && lo <= addr && addr < hi {
			return l
		}
	}
	return ""
}

// localContext is the context of the LocalRegion tests: shared memory and
// self, as an importer without RDMA has.
func localContext(t *testing.T) (*ucp.Context, *ucp.Worker) {
	ctx := newContext(t, ucp.WithConfig("TLS", "posix,sysv,self"))
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return ctx, w
}

// TestLocalRegionCloseUnmaps: a LocalRegion's key stays in the process, so
// the mapping's Close after the region's unmaps at once, where a mapping
// whose key was handed out stays in the unmap quarantine (it made
// re-imports of the range fail with ucs.ErrBusy until more bytes retired).
// Two regions of one mapping at once, and one after another, work.
func TestLocalRegionCloseUnmaps(t *testing.T) {
	ctx, w := localContext(t)
	for round := range 3 {
		m, err := ctx.Allocate(1 << 20)
		require.NoError(t, err)
		line := mappingAt(t, m.Address())
		require.NotEmpty(t, line, "the allocation is in /proc/self/maps")

		lr, err := w.LocalRegion(waitCtx(t), m)
		require.NoError(t, err)
		again, err := w.LocalRegion(waitCtx(t), m)
		require.NoError(t, err)
		want := pattern(4096, byte(round))
		_, err = lr.WriteAt(want, 1000)
		require.NoError(t, err)
		got := make([]byte, len(want))
		_, err = again.ReadAt(got, 1000)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		require.NoError(t, again.Close())
		require.NoError(t, lr.Close())
		require.NoError(t, lr.Close(), "a second Close does nothing")

		b, err := m.Bytes()
		require.NoError(t, err, "the mapping outlives its regions")
		assert.Equal(t, want, b[1000:1000+len(want)])
		require.NoError(t, m.Close())
		assert.NotEqual(t, line, mappingAt(t, m.Address()), "round %d: the mapping is still mapped after its Close", round)
	}

	// The contrast: a key that left the process keeps the mapping.
	m, err := ctx.Allocate(1 << 20)
	require.NoError(t, err)
	line := mappingAt(t, m.Address())
	_, err = m.PackRemoteKey()
	require.NoError(t, err)
	require.NoError(t, m.Close())
	assert.Equal(t, line, mappingAt(t, m.Address()), "a mapping whose key was handed out stays in the quarantine")
}

// TestLocalRegionMappingClosedFirst: the mapping closed before its region,
// with a get in flight through it, in a context without unmap quarantine.
// The get completes with the mapping's bytes: the mapping stays until the
// region is done (unmapped under the get, it made UCX abort the process
// over cma: process_vm_readv "Bad address", 1.18.1). Later operations fail
// with ucs.ErrClosed, and the region's Close then unmaps the mapping (seen
// where UCX allocates a shared segment: anonymous memory, which UCX
// allocates without shared-memory transports, merges with its neighbours
// in /proc/self/maps).
func TestLocalRegionMappingClosedFirst(t *testing.T) {
	for _, c := range []struct {
		tls       string
		seesUnmap bool
	}{{"posix,sysv,self", true}, {"cma,self", false}} {
		t.Run(c.tls, func(t *testing.T) {
			ctx := newContext(t, ucp.WithConfig("TLS", c.tls), ucp.WithUnmapQuarantine(0))
			w, err := ctx.NewWorker()
			require.NoError(t, err)
			defer w.Close()
			m, err := ctx.Allocate(1 << 20)
			require.NoError(t, err)
			line := mappingAt(t, m.Address())
			b, err := m.Bytes()
			require.NoError(t, err)
			want := pattern(len(b), 3)
			copy(b, want)

			lr, err := w.LocalRegion(waitCtx(t), m)
			require.NoError(t, err)
			got := make([]byte, len(want))
			req, err := lr.Get(got, 0)
			require.NoError(t, err)
			require.NoError(t, m.Close())
			require.NoError(t, req.Wait(waitCtx(t)))
			assert.True(t, bytes.Equal(want, got), "the get in flight read the mapping's bytes")

			_, err = lr.ReadAt(got[:8], 0)
			assert.ErrorIs(t, err, ucs.ErrClosed)
			_, err = lr.WriteAt(got[:8], 0)
			assert.ErrorIs(t, err, ucs.ErrClosed)
			_, err = w.LocalRegion(waitCtx(t), m)
			assert.ErrorIs(t, err, ucs.ErrClosed, "a closed mapping makes no region")
			if c.seesUnmap {
				assert.Equal(t, line, mappingAt(t, m.Address()), "mapped while its region is open")
			}

			require.NoError(t, lr.Close())
			if c.seesUnmap {
				assert.NotEqual(t, line, mappingAt(t, m.Address()), "the region's Close unmapped the closed mapping")
			}
			require.NoError(t, lr.Close())
		})
	}
}

// TestLocalRegionsConcurrent: goroutines make, use and close LocalRegions on
// one worker at once, each of a mapping of its own and of one they share,
// closing the region and its mapping in either order.
func TestLocalRegionsConcurrent(t *testing.T) {
	ctx, w := localContext(t)
	const goroutines, rounds, slot = 8, 10, 4096
	shared, err := ctx.Allocate(goroutines * slot)
	require.NoError(t, err)
	defer shared.Close()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			near := make([]byte, slot)
			nearMem, err := ctx.Register(near)
			if !assert.NoError(t, err) {
				return
			}
			defer nearMem.Close()
			for r := range rounds {
				m, err := ctx.Allocate(slot)
				if !assert.NoError(t, err) {
					return
				}
				lr, err := w.LocalRegion(waitCtx(t), m)
				if !assert.NoError(t, err) {
					m.Close()
					return
				}
				sl, err := w.LocalRegion(waitCtx(t), shared)
				if !assert.NoError(t, err) {
					lr.Close()
					m.Close()
					return
				}
				want := pattern(slot, byte(g*rounds+r))
				copy(near, want)
				req, err := lr.PutMem(nearMem.Range(0, slot), 0)
				if assert.NoError(t, err) {
					assert.NoError(t, req.Wait(waitCtx(t)))
				}
				assert.NoError(t, lr.Flush(waitCtx(t)))
				_, err = sl.WriteAt(want, int64(g*slot))
				assert.NoError(t, err)
				clear(near)
				req, err = sl.GetMem(nearMem.Range(0, slot), g*slot)
				if assert.NoError(t, err) {
					assert.NoError(t, req.Wait(waitCtx(t)))
				}
				assert.Equal(t, want, near)
				mb, err := m.Bytes()
				if assert.NoError(t, err) {
					assert.Equal(t, want, mb)
				}
				if r%2 == 0 {
					assert.NoError(t, lr.Close())
					assert.NoError(t, m.Close())
				} else {
					assert.NoError(t, m.Close())
					assert.NoError(t, lr.Close())
				}
				assert.NoError(t, sl.Close())
			}
		}()
	}
	wg.Wait()
}

// TestLocalRegionWorkerClosedFirst: the worker closed while LocalRegions
// are open makes no new ones; the open ones close after it without error
// (the last one closes the worker's loopback), and their mappings, closed
// before or after, are unmapped.
func TestLocalRegionWorkerClosedFirst(t *testing.T) {
	ctx, w := localContext(t)
	m1, err := ctx.Allocate(1 << 20)
	require.NoError(t, err)
	m2, err := ctx.Allocate(1 << 20)
	require.NoError(t, err)
	line1, line2 := mappingAt(t, m1.Address()), mappingAt(t, m2.Address())
	lr1, err := w.LocalRegion(waitCtx(t), m1)
	require.NoError(t, err)
	lr2, err := w.LocalRegion(waitCtx(t), m2)
	require.NoError(t, err)

	require.NoError(t, w.Close())
	_, err = w.LocalRegion(waitCtx(t), m1)
	assert.ErrorIs(t, err, ucs.ErrClosed)

	require.NoError(t, lr1.Close())
	require.NoError(t, m1.Close())
	assert.NotEqual(t, line1, mappingAt(t, m1.Address()))
	require.NoError(t, m2.Close())
	require.NoError(t, lr2.Close())
	assert.NotEqual(t, line2, mappingAt(t, m2.Address()))
}

// TestLocalRegionDroppedUnclosed: a region dropped without Close is ended
// by the garbage collector (its key counts as leaked); the worker, the
// mapping and the context then close as usual, and the suite's leak check
// finds nothing left.
func TestLocalRegionDroppedUnclosed(t *testing.T) {
	ctx, w := localContext(t)
	m, err := ctx.Allocate(4096)
	require.NoError(t, err)
	leaked := ucs.LeakedHandles()
	func() {
		lr, err := w.LocalRegion(waitCtx(t), m)
		require.NoError(t, err)
		_, err = lr.WriteAt([]byte("dropped"), 0)
		require.NoError(t, err)
	}()
	for i := 0; i < 200 && ucs.LeakedHandles() == leaked; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Greater(t, ucs.LeakedHandles(), leaked, "the dropped region's key was collected")
	runtime.GC() // and freed, which runs the region's cleanup
	lr, err := w.LocalRegion(waitCtx(t), m)
	require.NoError(t, err, "the worker makes regions after one was dropped")
	require.NoError(t, lr.Close())
	require.NoError(t, m.Close())
	require.NoError(t, w.Close())
}
