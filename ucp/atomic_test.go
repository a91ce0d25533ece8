package ucp_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

const amo = ucp.FeatureRMA | ucp.FeatureAM | ucp.FeatureAMO32 | ucp.FeatureAMO64

// TestNewcomerAtomics: a host shares a page of counters, a DPU service
// counts into them, in the order a newcomer writes it: two contexts with
// atomics, Listen, Connect (without peer error handling, which atomics
// need), PackRegion, UnpackRegion, then every atomic.
func TestNewcomerAtomics(t *testing.T) {
	for _, tls := range []string{"tcp", ""} {
		t.Run("tls="+tls, func(t *testing.T) { newcomerAtomics(t, tls) })
	}
}

func newcomerAtomics(t *testing.T, tls string) {
	opts := []ucp.ContextOption{ucp.WithFeatures(amo)}
	if tls != "" {
		opts = append(opts, ucp.WithConfig("TLS", tls))
	}
	hostCtx, err := ucp.NewContext(opts...)
	require.NoError(t, err)
	defer hostCtx.Close()
	host, err := hostCtx.NewWorker()
	require.NoError(t, err)
	defer host.Close()
	run, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- host.Run(run) }() // the host serves its memory
	defer func() { stop(); <-ran }()
	l, err := host.Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	counters, err := hostCtx.Allocate(4096)
	require.NoError(t, err)
	defer counters.Close()
	packed, err := counters.PackRegion()
	require.NoError(t, err)

	dpuCtx, err := ucp.NewContext(opts...)
	require.NoError(t, err)
	defer dpuCtx.Close()
	dpu, err := dpuCtx.NewWorker()
	require.NoError(t, err)
	defer dpu.Close()
	accepted := make(chan *ucp.Endpoint, 1)
	go func() {
		ep, err := l.Accept(waitCtx(t), ucp.WithPeerErrorHandling(false))
		assert.NoError(t, err)
		accepted <- ep
	}()
	// UCX performs atomics only on endpoints without peer error handling.
	ep, err := dpu.Connect(waitCtx(t), l.Addr().String(), ucp.WithPeerErrorHandling(false))
	require.NoError(t, err)
	defer ep.Close(waitCtx(t), ucp.CloseFlush)
	hep := <-accepted
	require.NotNil(t, hep)
	defer hep.Close(waitCtx(t), ucp.CloseForce)
	r, err := ep.UnpackRegion(waitCtx(t), packed)
	require.NoError(t, err)
	defer r.Key().Close()

	ctx := waitCtx(t)
	old, err := r.FetchAdd64(ctx, 0, 5)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), old)
	old, err = r.FetchAdd64(ctx, 0, 7)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), old)
	req, err := r.Add64(0, 100)
	require.NoError(t, err)
	copied := req // a copy of a Request is the same operation
	require.NoError(t, req.Wait(ctx))
	require.NoError(t, copied.Wait(ctx))
	require.NoError(t, r.Flush(ctx)) // the add is in the host's memory
	old, err = r.Swap64(ctx, 0, 1<<40)
	require.NoError(t, err)
	assert.Equal(t, uint64(112), old)
	prev, err := r.CompareAndSwap64(ctx, 0, 1, 2) // holds 1<<40: no swap
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<40), prev)
	prev, err = r.CompareAndSwap64(ctx, 0, 1<<40, 3)
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<40), prev)

	old32, err := r.FetchAdd32(ctx, 8, 0xffffffff)
	require.NoError(t, err)
	assert.Equal(t, uint32(0), old32)
	old32, err = r.FetchAdd32(ctx, 8, 2) // wraps at 32 bits, touching no byte past the word
	require.NoError(t, err)
	assert.Equal(t, uint32(0xffffffff), old32)
	req, err = r.Add32(12, 9)
	require.NoError(t, err)
	require.NoError(t, req.Wait(ctx))
	require.NoError(t, r.Flush(ctx))
	old32, err = r.Swap32(ctx, 12, 4)
	require.NoError(t, err)
	assert.Equal(t, uint32(9), old32)
	prev32, err := r.CompareAndSwap32(ctx, 12, 4, 6)
	require.NoError(t, err)
	assert.Equal(t, uint32(4), prev32)

	b, err := counters.Bytes()
	require.NoError(t, err)
	assert.Equal(t, uint64(3), binary.NativeEndian.Uint64(b[0:]))
	assert.Equal(t, uint32(1), binary.NativeEndian.Uint32(b[8:]))
	assert.Equal(t, uint32(6), binary.NativeEndian.Uint32(b[12:]))
	assert.Equal(t, make([]byte, 4096-16), b[16:], "no byte past the words changed")
}

// TestAtomicsCounted: goroutines fetch-add one word at once; every old
// value is seen once and the sum is exact.
func TestAtomicsCounted(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(amo)), withPeerErr(false), runServer())
	_, r := p.mapRegion(t, 64)
	const goroutines, each = 4, 200
	seen := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				old, err := r.FetchAdd64(waitCtx(t), 8, 1)
				if !assert.NoError(t, err) {
					return
				}
				seen[g] = append(seen[g], old)
			}
		}()
	}
	wg.Wait()
	all := map[uint64]bool{}
	for _, s := range seen {
		for _, v := range s {
			assert.False(t, all[v], "old value %d seen twice", v)
			all[v] = true
		}
	}
	assert.Len(t, all, goroutines*each)
	v, err := r.FetchAdd64(waitCtx(t), 8, 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(goroutines*each), v)
}

// TestAtomicsRefused: what the binding refuses before anything reaches
// UCX, each with its cause.
func TestAtomicsRefused(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(amo)), withPeerErr(false), runServer())
	_, r := p.mapRegion(t, 64)
	ctx := waitCtx(t)
	_, err := r.FetchAdd64(ctx, 4, 1)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam, "misaligned")
	assert.ErrorContains(t, err, "not aligned")
	_, err = r.Add32(2, 1)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam, "misaligned")
	_, err = r.Swap64(ctx, r.Len(), 1)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange, "past the end")
	end, err := r.Sub(0, 12)
	require.NoError(t, err)
	_, err = end.FetchAdd64(ctx, 8, 1)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange, "half past the end")
	_, err = r.CompareAndSwap32(ctx, -4, 0, 1)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange, "before the start")
	sub, err := r.Sub(4, 8)
	require.NoError(t, err)
	_, err = sub.FetchAdd64(ctx, 0, 1) // the peer's address is base+4
	assert.ErrorIs(t, err, ucs.ErrInvalidParam, "aligned in the region, not in the peer")
	_, err = ucp.RemoteRegion{}.FetchAdd64(ctx, 0, 1)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam, "the zero region")

	require.NoError(t, r.Key().Close())
	_, err = r.FetchAdd64(ctx, 0, 1)
	assert.ErrorIs(t, err, ucs.ErrClosed)
	_, err = r.Add64(0, 1)
	assert.ErrorIs(t, err, ucs.ErrClosed)

	// A context made without the feature refuses the operation, naming it.
	q := newPair(t, onTLS("tcp"), withPeerErr(false), runServer()) // RMA and AM only
	_, r2 := q.mapRegion(t, 64)
	_, err = r2.FetchAdd64(ctx, 0, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "FeatureAMO64")
	_, err = r2.Add32(0, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "FeatureAMO32")

	// An endpoint with peer error handling (ucp's default) is refused:
	// UCX has no atomic protocol for it, and aborted on 1.22.0.
	e := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(amo)), runServer())
	_, r3 := e.mapRegion(t, 64)
	_, err = r3.FetchAdd64(ctx, 0, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "WithPeerErrorHandling(false)")
	_, err = r3.Add64(0, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
}

// TestAtomicHonoursContext: a fetch from a peer that never progresses ends
// with ctx; the operation completes once the peer runs, and the slot it
// wrote is not handed to the next atomic meanwhile.
func TestAtomicHonoursContext(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(amo)), withPeerErr(false)) // nobody progresses the server
	target, r := p.mapRegion(t, 64)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := r.FetchAdd64(short, 0, 1)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	runWorker(t, p.server)
	old, err := r.FetchAdd64(waitCtx(t), 0, 10)
	require.NoError(t, err)
	// The given-up add may land before or after this one; with both done
	// the word holds 11.
	assert.Contains(t, []uint64{0, 1}, old)
	require.NoError(t, r.Flush(waitCtx(t)))
	b, err := target.Bytes()
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return binary.NativeEndian.Uint64(b) == 11 }, 5*time.Second, time.Millisecond)
}
