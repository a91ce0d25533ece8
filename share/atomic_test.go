package share_test

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

func atomicCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestNewcomerAtomics: a DPU updates a counter, a doorbell and a lock word
// in the host's memory; the host sees each, and its own atomics on the
// same words mix with the importer's without a lost update.
func TestNewcomerAtomics(t *testing.T) {
	ctx := atomicCtx(t)
	mem := memory(t, make([]byte, 4096))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "words", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("words")
	require.NoError(t, err)
	host := mem.Bytes()
	word64 := func(off int) *uint64 { return (*uint64)(unsafe.Pointer(&host[off])) }
	word32 := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&host[off])) }

	old, err := r.FetchAdd64(ctx, 0, 5)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), old)
	assert.Equal(t, uint64(5), atomic.LoadUint64(word64(0)), "the host sees the add")
	require.NoError(t, r.Add64(ctx, 0, 10))
	assert.Equal(t, uint64(15), atomic.LoadUint64(word64(0)))

	got, err := r.CompareAndSwap64(ctx, 8, 0, 0xfeed)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), got, "swapped: the old value back")
	got, err = r.CompareAndSwap64(ctx, 8, 0, 0xbad)
	require.NoError(t, err)
	assert.Equal(t, uint64(0xfeed), got, "not swapped: the word as found")
	assert.Equal(t, uint64(0xfeed), atomic.LoadUint64(word64(8)))

	prev, err := r.Swap32(ctx, 16, 7)
	require.NoError(t, err)
	assert.Equal(t, uint32(0), prev)
	require.NoError(t, r.Add32(ctx, 16, 1))
	v32, err := r.FetchAdd32(ctx, 16, 0)
	require.NoError(t, err)
	assert.Equal(t, uint32(8), v32)
	g32, err := r.CompareAndSwap32(ctx, 16, 8, 9)
	require.NoError(t, err)
	assert.Equal(t, uint32(8), g32)
	assert.Equal(t, uint32(9), atomic.LoadUint32(word32(16)))
	s64, err := r.Swap64(ctx, 24, 1<<40)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), s64)
	assert.Equal(t, uint64(1<<40), binary.LittleEndian.Uint64(host[24:]))

	// The importer's fetch-adds and the host's adds on one counter: no
	// update lost, and every value the importer fetched is distinct.
	const rounds, workers = 100, 3
	var wg sync.WaitGroup
	seen := make(chan uint64, rounds*workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				v, err := r.FetchAdd64(ctx, 64, 1)
				if !assert.NoError(t, err) {
					return
				}
				seen <- v
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			atomic.AddUint64(word64(64), 1000)
		}
	}()
	wg.Wait()
	close(seen)
	assert.Equal(t, uint64(rounds*workers+rounds*1000), atomic.LoadUint64(word64(64)), "an update was lost")
	distinct := map[uint64]bool{}
	for v := range seen {
		assert.False(t, distinct[v], "fetched %d twice", v)
		distinct[v] = true
	}
	assert.Equal(t, int64(9+rounds*workers), imp.Stats().Atomics)
}

// Atomics check what the grant allows, the bounds and the alignment
// before anything leaves the importer, and end with the grant.
func TestAtomicsChecked(t *testing.T) {
	ctx := atomicCtx(t)
	ro, wo, rw := memory(t, make([]byte, 64)), memory(t, make([]byte, 64)), memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "ro", ro, share.ReadOnly))
	require.NoError(t, e.Add(ctx, "wo", wo, share.WriteOnly))
	require.NoError(t, e.Add(ctx, "rw", rw, share.ReadWrite))
	imp := dial(t, addr)
	region := func(id string) *share.Region {
		r, err := imp.Region(id)
		require.NoError(t, err)
		return r
	}
	rro, rwo, rrw := region("ro"), region("wo"), region("rw")

	require.ErrorIs(t, rro.Add64(ctx, 0, 1), share.ErrAccess)
	_, err := rro.FetchAdd64(ctx, 0, 1)
	require.ErrorIs(t, err, share.ErrAccess)
	require.NoError(t, rwo.Add64(ctx, 0, 3), "a write-only grant adds")
	assert.Equal(t, uint64(3), binary.LittleEndian.Uint64(wo.Bytes()))
	_, err = rwo.Swap64(ctx, 0, 1)
	require.ErrorIs(t, err, share.ErrAccess, "a fetching atomic reads")
	assert.Equal(t, uint64(3), binary.LittleEndian.Uint64(wo.Bytes()), "nothing moved")

	for _, off := range []int{-8, 64, 60, 1 << 40} {
		_, err = rrw.FetchAdd64(ctx, off, 1)
		require.ErrorIs(t, err, ucs.ErrOutOfRange, "offset %d", off)
	}
	_, err = rrw.FetchAdd32(ctx, 64, 1)
	require.ErrorIs(t, err, ucs.ErrOutOfRange)
	for _, off := range []int{1, 4, 12} {
		_, err = rrw.CompareAndSwap64(ctx, off, 0, 1)
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "offset %d", off)
	}
	_, err = rrw.FetchAdd32(ctx, 2, 1)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Equal(t, make([]byte, 64), rw.Bytes(), "no check let a byte through")

	_, err = e.Remove(ctx, "rw")
	require.NoError(t, err)
	_, err = rrw.FetchAdd64(ctx, 0, 1)
	require.ErrorIs(t, err, share.ErrRevoked)
	require.NoError(t, imp.Close())
	_, err = rwo.FetchAdd64(ctx, 0, 1)
	require.ErrorIs(t, err, share.ErrClosed)
}

// A hostile importer that speaks to the exporter's data path directly:
// an atomic on a read-only grant, outside a grant, misaligned, on a
// generation it was never given or that was revoked, or malformed, is
// refused there and changes no byte; the process serves on.
func TestContainedAtomicsRefused(t *testing.T) {
	ctx := atomicCtx(t)
	ro, rw, gone := memory(t, pattern(64, 1)), memory(t, make([]byte, 64)), memory(t, make([]byte, 64))
	roWant, goneWant := append([]byte(nil), ro.Bytes()...), append([]byte(nil), gone.Bytes()...)
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(ctx, "ro", ro, share.ReadOnly))
	require.NoError(t, e.Add(ctx, "rw", rw, share.ReadWrite))
	require.NoError(t, e.Add(ctx, "gone", gone, share.ReadWrite))
	h := dialHostile(t, addr)
	goneGen := h.grants["gone"].gen
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := e.Remove(rctx, "gone") // the hostile does not acknowledge: unmapped at the ctx's end
	require.ErrorIs(t, err, ucs.ErrTimedOut)

	answers := make(chan []byte, 16)
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(m *ucp.AMMessage) {
		answers <- append([]byte(nil), m.Header...)
	}))
	ask := func(op, size byte, gen, off, operand, compare uint64) (status int8, value uint64, answered bool) {
		b := make([]byte, 48)
		b[0], b[1] = op, size
		binary.LittleEndian.PutUint64(b[8:], 77)
		binary.LittleEndian.PutUint64(b[16:], gen)
		binary.LittleEndian.PutUint64(b[24:], off)
		binary.LittleEndian.PutUint64(b[32:], operand)
		binary.LittleEndian.PutUint64(b[40:], compare)
		return h.atomicRaw(b, answers)
	}
	cases := []struct {
		name    string
		op      byte
		size    byte
		gen     uint64
		off     uint64
		refused bool
	}{
		{"read-only grant", 2, 8, h.grants["ro"].gen, 0, true},
		{"past the region", 2, 8, h.grants["rw"].gen, 64, true},
		{"far past the region", 2, 8, h.grants["rw"].gen, 1 << 62, true},
		{"wrapping offset", 2, 8, h.grants["rw"].gen, ^uint64(0) - 3, true},
		{"misaligned", 2, 8, h.grants["rw"].gen, 4, true},
		{"never granted", 2, 8, 999, 0, true},
		{"revoked", 2, 8, goneGen, 0, true},
		{"granted", 2, 8, h.grants["rw"].gen, 8, false},
	}
	for _, c := range cases {
		st, v, answered := ask(c.op, c.size, c.gen, c.off, 1, 0)
		require.True(t, answered, "%s: no answer", c.name)
		if c.refused {
			assert.Negative(t, st, "%s: performed", c.name)
		} else {
			assert.Zero(t, st, "%s", c.name)
			assert.Equal(t, uint64(0), v)
		}
	}
	// Malformed requests get no answer and change nothing.
	for _, b := range [][]byte{nil, make([]byte, 47), make([]byte, 49), append([]byte{9, 8}, make([]byte, 46)...), append([]byte{2, 3}, make([]byte, 46)...), append([]byte{2, 8, 1}, make([]byte, 45)...)} {
		_, _, answered := h.atomicRaw(b, answers)
		assert.False(t, answered, "a malformed request of %d bytes was answered", len(b))
	}
	assert.Equal(t, roWant, ro.Bytes(), "the read-only region changed")
	assert.Equal(t, goneWant, gone.Bytes(), "the revoked region changed")
	want := make([]byte, 64)
	want[8] = 1
	assert.Equal(t, want, rw.Bytes(), "only the granted add landed")
	stillServes(t, addr, "rw", want)
}

// atomicRaw sends an atomic request with header b on the hostile's data
// endpoint and waits a while for an answer.
func (h *hostile) atomicRaw(b []byte, answers chan []byte) (status int8, value uint64, answered bool) {
	t := h.t
	req, err := h.ep.SendAM(0x5e02, b, nil, ucp.AMReply)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, req.Wait(ctx))
	wait := 5 * time.Second
	if len(b) != 48 || b[0] > 4 || b[0] == 0 || (b[1] != 4 && b[1] != 8) || b[2] != 0 {
		wait = 300 * time.Millisecond // no answer is expected: wait a little for one
	}
	select {
	case a := <-answers:
		require.Len(t, a, 24)
		return int8(a[8]), binary.LittleEndian.Uint64(a[16:]), true
	case <-time.After(wait):
		return 0, 0, false
	}
}
