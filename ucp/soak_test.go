package ucp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// soakEnv sets the number of soak cycles (make soak: 100000); the default
// keeps the soak in every test run.
const soakEnv = "UCXGO_SOAK_CYCLES"

// rssBytes is the resident set size from /proc/self/statm.
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	require.NoError(t, err)
	f := strings.Fields(string(b))
	require.GreaterOrEqual(t, len(f), 2, "statm: %q", b)
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize())
}

// settledRSS collects garbage and returns freed heap to the system first,
// so that what remains is memory something still holds.
func settledRSS(t *testing.T) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	return rssBytes(t)
}

// The soak's bounds, explained at TestSoak.
const (
	soakSamples     = 40
	soakRSSSlope    = 32 // bytes a cycle, over at least soakSlopeCycles
	soakHeapSlope   = 16 // bytes of live Go heap a cycle
	soakSlopeCycles = 50000
	soakTotalBound  = 8 << 20
	soakHeapTotal   = 1 << 20
)

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// liveHeap is the Go heap still reachable, after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Cycles of map / export attempt / rkey pack / unpack / put / unmap, with
// UCX-allocated and registered Go memory in turn, every handle released.
//
// What it detects: a handle not released (every run); memory kept per
// cycle, as the least-squares slope of soakSamples samples over the
// cycles: of the live Go heap after a collection (exact: soakHeapSlope
// bytes a cycle, every run), and of the resident set after a collection
// that returned freed heap to the system, which holds UCX's and the C
// allocator's memory too (soakRSSSlope bytes a cycle, from
// soakSlopeCycles cycles on: make soak and make stress run 100000; below
// that the resident set's noise, a few hundred KiB, outweighs such a
// slope). A pool or arena that grows once (3 MiB at one point of a CI run
// on UCX 1.16.0, flat before and after) tilts a slope over many cycles
// little, and the total only has to stay under soakTotalBound. What it
// cannot detect: memory kept per cycle below those slopes, memory that
// stops growing within the run (a bounded cache), and leaks in paths the
// cycle does not take.
func TestSoak(t *testing.T) {
	leakcheck.Goroutines(t)
	cycles := 2000
	if s := os.Getenv(soakEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "%s=%q", soakEnv, s)
		cycles = n
	}
	warmup := max(500, cycles/10)
	base := ucs.LiveHandles()
	t.Cleanup(func() { // runs after the pair's cleanups closed it
		assert.Equal(t, base, ucs.LiveHandles(), "live handles after the soak")
	})

	// Every cycle's mapping has handed out a key, so its Close leaves it in
	// the context's unmap quarantine: a 1 MiB quarantine fills during the
	// warm-up (500 mappings of 4 KiB), and from then on each cycle unmaps
	// the oldest. Growth beyond that is a leak.
	p := newPair(t, onTLS("posix,sysv,self"), withPeerErr(false), withContext(ucp.WithUnmapQuarantine(1<<20)), runServer())
	const size = 4096
	payload := make([]byte, 64)
	cycle := func(i int) {
		// Not waitCtx: its cleanup would be kept per cycle until the end.
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var mem *ucp.Mem
		var err error
		if i%2 == 0 {
			mem, err = p.ctx.Allocate(size)
		} else {
			mem, err = p.ctx.Register(make([]byte, size))
		}
		require.NoError(t, err, "cycle %d: map", i)
		if _, err := mem.Export(); !errors.Is(err, ucs.ErrUnsupported) {
			require.NoError(t, err, "cycle %d: export attempt", i)
		}
		packed, err := mem.PackRemoteKey()
		require.NoError(t, err, "cycle %d: pack rkey", i)
		rkey, err := p.ep.UnpackRemoteKey(context.Background(), packed)
		require.NoError(t, err, "cycle %d: unpack rkey", i)
		off := (i * 64) % (size - len(payload))
		binary.LittleEndian.PutUint64(payload, uint64(i))
		req, err := putAt(payload, mem.Address()+uint64(off), rkey)
		require.NoError(t, err, "cycle %d: put", i)
		require.NoError(t, req.Wait(wctx), "cycle %d: put", i)
		require.NoError(t, p.ep.Flush(wctx), "cycle %d: flush", i)
		b, err := mem.Bytes()
		require.NoError(t, err)
		require.True(t, bytes.Equal(payload, b[off:off+len(payload)]), "cycle %d: put did not land", i)
		require.NoError(t, rkey.Close())
		require.NoError(t, mem.Close())
	}

	for i := range warmup {
		cycle(i)
	}
	interval := max(1, cycles/soakSamples)
	before, heapBefore := settledRSS(t), liveHeap()
	var xs, rssYs, heapYs []float64
	for i := warmup; i < warmup+cycles; i++ {
		cycle(i)
		if n := i - warmup + 1; n%interval == 0 {
			rss, heap := settledRSS(t), liveHeap()
			xs, rssYs, heapYs = append(xs, float64(n)), append(rssYs, float64(rss)), append(heapYs, float64(heap))
		}
	}
	after, heapAfter := settledRSS(t), liveHeap()
	rssSlope, heapSlope := slope(xs, rssYs), slope(xs, heapYs)
	t.Logf("soak: %d cycles after %d warm-up cycles: RSS %d KiB -> %d KiB (%+d KiB, slope %+.1f bytes a cycle), live Go heap %+d KiB (slope %+.2f bytes a cycle); leaked handles %d",
		cycles, warmup, before>>10, after>>10, (after-before)>>10, rssSlope, (heapAfter-heapBefore)>>10, heapSlope, ucs.LeakedHandles())
	if raceDetector {
		t.Log("soak: memory not bounded under the race detector, whose shadow and sync memory grows by itself")
	} else {
		assert.Less(t, heapSlope, float64(soakHeapSlope), "the live Go heap grows %.1f bytes a cycle: a leak", heapSlope)
		assert.Less(t, heapAfter-heapBefore, int64(soakHeapTotal), "the live Go heap grew by %d KiB", (heapAfter-heapBefore)>>10)
		if cycles >= soakSlopeCycles {
			assert.Less(t, rssSlope, float64(soakRSSSlope), "RSS grows %.1f bytes a cycle: a leak", rssSlope)
		} else {
			t.Logf("soak: the RSS slope is bounded from %d cycles on (make soak)", soakSlopeCycles)
		}
		assert.Less(t, after-before, int64(soakTotalBound), "RSS grew by %d KiB over %d cycles", (after-before)>>10, cycles)
	}
	assert.Equal(t, base+4, ucs.LiveHandles(), "only the pair's context, two workers and endpoint are live")
}
