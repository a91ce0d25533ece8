package ucp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
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

// The soak's bounds on resident memory, explained at TestSoak.
const (
	soakIntervals   = 20
	soakMedianBound = 24 << 10
	soakTotalBound  = 8 << 20
)

// Cycles of map / export attempt / rkey pack / unpack / put / unmap, with
// UCX-allocated and registered Go memory in turn, every handle released.
// A leak grows resident memory in every stretch of cycles, while a pool or
// allocator arena that grows once (3 MiB at one point of a CI run on UCX
// 1.16.0, flat before and after) does not. So the bound is on the median
// growth of soakIntervals equal stretches (soakMedianBound, 240 bytes a
// cycle at the default 2000 cycles), and the total only has to stay under
// soakTotalBound.
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
		req, err := p.ep.Put(payload, mem.Address()+uint64(off), rkey)
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
	interval := max(1, cycles/soakIntervals)
	before := settledRSS(t)
	last := before
	var growths []int64
	for i := warmup; i < warmup+cycles; i++ {
		cycle(i)
		if n := i - warmup + 1; n%interval == 0 {
			rss := settledRSS(t)
			growths = append(growths, rss-last)
			last = rss
			t.Logf("soak: after %d cycles RSS %d KiB (%+d KiB)", n, rss>>10, growths[len(growths)-1]>>10)
		}
	}
	after := settledRSS(t)
	slices.Sort(growths)
	median := growths[len(growths)/2]
	t.Logf("soak: %d cycles after %d warm-up cycles: RSS %d KiB -> %d KiB, growth %+d KiB, median per %d cycles %+d KiB; leaked handles %d",
		cycles, warmup, before>>10, after>>10, (after-before)>>10, interval, median>>10, ucs.LeakedHandles())
	if raceDetector {
		t.Log("soak: RSS not bounded under the race detector, whose shadow and sync memory grows by itself")
	} else {
		assert.Less(t, median, int64(soakMedianBound),
			"RSS grew in most stretches of %d cycles (median %+d KiB): a leak", interval, median>>10)
		assert.Less(t, after-before, int64(soakTotalBound), "RSS grew by %d KiB over %d cycles", (after-before)>>10, cycles)
	}
	assert.Equal(t, base+4, ucs.LiveHandles(), "only the pair's context, two workers and endpoint are live")
}
