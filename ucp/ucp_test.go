package ucp_test

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// UCX's single thread mode is never safe from Go: NewWorker refuses it,
// and any value that is not a thread mode.
func TestWorkerThreadModes(t *testing.T) {
	ctx := newContext(t)
	for _, m := range []ucp.ThreadMode{ucp.ThreadSerialized, ucp.ThreadMulti} {
		w, err := ctx.NewWorker(ucp.WithThreadMode(m))
		require.NoError(t, err, "%v", m)
		require.NoError(t, w.Close())
	}
	for _, m := range []ucp.ThreadMode{0, 3, -1} {
		_, err := ctx.NewWorker(ucp.WithThreadMode(m))
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "%v", m)
	}
	assert.Equal(t, "single", ucp.ThreadMode(0).String())
}

func TestContextInfo(t *testing.T) {
	ctx := newContext(t, ucp.WithName("info-test"))
	info, err := ctx.Info()
	require.NoError(t, err)
	assert.NotZero(t, info.RequestSize)
	assert.Equal(t, "info-test", info.Name)
	assert.NotZero(t, info.MemoryTypes&1, "host memory supported")
	assert.NotZero(t, ctx.Features()&ucp.FeatureWakeup, "wakeup is always on")

	// UCP keeps unknown names for the transports, but checks known ones.
	_, err = ucp.NewContext(ucp.WithConfig("RNDV_THRESH", "not-a-size"))
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Contains(t, err.Error(), `config RNDV_THRESH="not-a-size"`)
}

func TestMapKinds(t *testing.T) {
	ctx := newContext(t)
	alloc, err := ctx.Allocate(1 << 20)
	require.NoError(t, err)
	defer alloc.Close()
	assert.Equal(t, ucs.MemAllocated, alloc.Kind())
	assert.GreaterOrEqual(t, alloc.Len(), 1<<20)
	b, err := alloc.Bytes()
	require.NoError(t, err)
	b[len(b)-1] = 1

	buf := make([]byte, 64<<10)
	reg, err := ctx.Register(buf, ucp.WithProt(ucp.ProtLocalRead|ucp.ProtRemoteRead))
	require.NoError(t, err)
	defer reg.Close()
	assert.Equal(t, ucs.MemRegistered, reg.Kind())
	rb, err := reg.Bytes()
	require.NoError(t, err)
	assert.Equal(t, &buf[0], &rb[0], "Bytes of a registered slice is that slice")

	_, err = ctx.Register(nil)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	_, err = ctx.Allocate(-1)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
}

// No memory domain here can export: Export answers unsupported, with the
// reason, and never aborts.
func TestExportUnsupportedHere(t *testing.T) {
	ctx := newContext(t)
	mem, err := ctx.Allocate(1 << 20)
	require.NoError(t, err)
	defer mem.Close()
	desc, err := mem.Export()
	if err == nil {
		t.Skipf("a memory domain here can export (%d-byte descriptor): covered by TestExportImportEndToEnd", len(desc))
	}
	require.Nil(t, desc)
	require.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.Equal(t, "ucp: export memory handle: Unsupported operation: no memory domain of the mapping has UCT_MD_FLAG_EXPORTED_MKEY", err.Error())
}

// UCX's 3-byte dummy, what a zero-length mapping exports where a memory
// domain can export, imports (TestZeroLengthExport covers the export).
func TestDummyDescriptorImports(t *testing.T) {
	ctx := newContext(t)
	desc := []byte{0, 0, 0}
	d, err := ucp.ParseDescriptor(desc)
	require.NoError(t, err)
	assert.True(t, d.Dummy())

	imported, err := ctx.Import(d)
	require.NoError(t, err)
	assert.Equal(t, ucs.MemImported, imported.Kind())
	assert.Zero(t, imported.Len())
	_, err = imported.Bytes()
	require.ErrorIs(t, err, ucs.ErrInvalidAddr)
	_, err = imported.Export()
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	require.NoError(t, imported.Close())
}

// An honest descriptor of an "ib" memory domain this machine does not have
// is refused in Go with "no matching MD", never handed to UCX.
func TestImportNoMatchingMD(t *testing.T) {
	ctx := newContext(t)
	d, err := ucp.ParseDescriptor(sampleDescriptor(6))
	require.NoError(t, err)
	_, err = ctx.Import(d)
	require.ErrorIs(t, err, ucs.ErrUnreachable)
	assert.Contains(t, err.Error(), "no matching MD")
}

func TestActiveMessages(t *testing.T) {
	onEachTransport(t, func(t *testing.T, p *pair) {
		type got struct {
			header, data []byte
			err          error
		}
		inbox := make(chan got, 4)
		require.NoError(t, p.server.SetAMHandler(7, func(m *ucp.AMMessage) {
			g := got{header: m.Header}
			buf := make([]byte, m.Len())
			req, err := m.ReceiveInto(buf)
			if err != nil {
				inbox <- got{err: err}
				return
			}
			go func() { // the rendezvous receive completes while the worker runs
				g.err = req.Wait(context.Background())
				g.data = buf
				inbox <- g
			}()
		}))
		defer p.server.ClearAMHandler(7)
		for _, n := range []int{0, 8, 4 << 10, 1 << 20, 8 << 20} {
			data := pattern(n, 3)
			req, err := p.ep.SendAM(7, []byte("hdr"), data, ucp.AMReply)
			require.NoError(t, err)
			require.NoError(t, req.Wait(waitCtx(t)))
			select {
			case g := <-inbox:
				require.NoError(t, g.err)
				assert.Equal(t, []byte("hdr"), g.header)
				assert.True(t, bytes.Equal(data, g.data), "payload of %d bytes", n)
			case <-time.After(20 * time.Second):
				t.Fatalf("active message of %d bytes not delivered", n)
			}
		}
	})
}

func TestFlushWorker(t *testing.T) {
	p := newPair(t, onTLS("posix,sysv,self"), withPeerErr(false), runServer())
	require.NoError(t, p.client.Flush(waitCtx(t)))
	require.NoError(t, p.ep.Flush(waitCtx(t)))
}

// A get from a target whose worker never progresses cannot complete over
// AM-emulated RMA: Wait ends with the context's deadline, also when the
// worker spins for longer than the deadline.
func TestWaitHonoursContext(t *testing.T) {
	t.Run("default-spin", func(t *testing.T) { testWaitHonoursContext(t) })
	t.Run("spin-an-hour", func(t *testing.T) { testWaitHonoursContext(t, ucp.WithSpin(time.Hour)) })
}

func testWaitHonoursContext(t *testing.T, opts ...ucp.WorkerOption) {
	p := newPair(t, onTLS("tcp"), withClientOpts(opts...)) // the server is never progressed
	client, server := p.client, p.server
	target, rkey := p.mapTarget(t, 4096)

	req, err := getAt(make([]byte, 8), target.Address(), rkey)
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = req.Wait(dctx)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, req.Done(), "a Wait that gave up leaves the get in flight")

	// Once the target progresses, a second Wait resumes the same get.
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- server.Run(runCtx) }()
	require.NoError(t, req.Wait(waitCtx(t)))
	assert.True(t, req.Done())
	stopRun()
	require.NoError(t, <-ran)

	req2, err := getAt(make([]byte, 8), target.Address(), rkey)
	require.NoError(t, err)
	cctx, cancel2 := context.WithCancel(context.Background())
	cancel2()
	err = req2.Wait(cctx)
	if err != nil {
		require.ErrorIs(t, err, ucs.ErrCanceled)
	}
	req2.Detach() // nobody waits for it any more: the worker releases it
	req3, err := getAt(make([]byte, 8), target.Address(), rkey)
	require.NoError(t, err)
	req3.Detach()
	require.ErrorIs(t, req3.Wait(context.Background()), ucs.ErrCanceled, "every copy of a detached request says so")
	for range 1000 {
		server.Progress()
		client.Progress()
	}
}

// A remote key is good for RMA on the endpoint it was unpacked on only
// (UCX applies its lanes to any endpoint unchecked): its regions carry that
// endpoint, so no call can name another. It belongs to its worker, so it
// outlives its endpoint and an endpoint's close never waits for it.
func TestRemoteKeyOnlyOnItsEndpoint(t *testing.T) {
	p := newPair(t, onTLS("posix,sysv,self"), withPeerErr(false), runServer(), connectBack())
	target, rkey := p.mapTarget(t, 4096)

	tb, err := target.Bytes()
	require.NoError(t, err)
	copy(tb, "12345678")
	buf := make([]byte, 8)
	req, err := getAt(buf, target.Address(), rkey)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	assert.Equal(t, "12345678", string(buf))

	// The key outlives its endpoint's close, which does not wait for it.
	live := ucs.LiveHandles()
	closeEP(t, p.ep)
	assert.Equal(t, live-1, ucs.LiveHandles(), "the endpoint is released though its key is open")
	_, err = getAt(buf, target.Address(), rkey)
	require.ErrorIs(t, err, ucs.ErrClosed)
	require.NoError(t, rkey.Close())
}

// A worker that spins for an hour still closes at once: its Close ends the
// spin of a Run (and a listener's Close the spin of an Accept).
func TestLongSpinDoesNotHoldClose(t *testing.T) {
	ctx := newContext(t)
	w, err := ctx.NewWorker(ucp.WithSpin(time.Hour))
	require.NoError(t, err)
	l, err := w.Listen("127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan error, 1)
	go func() { _, err := l.Accept(context.Background()); accepted <- err }()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // both are spinning now

	closed := make(chan struct{})
	go func() { l.Close(); w.Close(); close(closed) }()
	for _, c := range []struct {
		what string
		done <-chan struct{}
	}{{"Close", closed}} {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("HANG: %s waited for a spinning wait", c.what)
		}
	}
	select {
	case err := <-accepted:
		require.ErrorIs(t, err, ucs.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("HANG: Accept did not end once its listener was closed")
	}
	select {
	case err := <-ran:
		if err != nil {
			require.ErrorIs(t, err, ucs.ErrClosed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("HANG: Run did not end once its worker was closed")
	}
}

func TestUseAfterClose(t *testing.T) {
	p := newPair(t, withPeerErr(false))
	ctx, w, peer, ep, addr := p.ctx, p.client, p.server, p.ep, p.saddr
	mem, rkey := p.mapTarget(t, 4096)
	packed, err := mem.PackRemoteKey()
	require.NoError(t, err)
	l, err := w.Listen("127.0.0.1:0")
	require.NoError(t, err)

	require.NoError(t, rkey.Close())
	_, err = putAt([]byte{1}, mem.Address(), rkey)
	require.ErrorIs(t, err, ucs.ErrClosed)

	require.NoError(t, ep.Close(waitCtx(t), ucp.CloseForce))
	_, err = putAt([]byte{1}, mem.Address(), rkey)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = ep.UnpackRemoteKey(context.Background(), packed)
	require.ErrorIs(t, err, ucs.ErrClosed)
	require.ErrorIs(t, ep.Flush(waitCtx(t)), ucs.ErrClosed)
	_, err = ep.SendAM(1, nil, nil, 0)
	require.ErrorIs(t, err, ucs.ErrClosed)

	require.NoError(t, mem.Close())
	_, err = mem.Bytes()
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = mem.Export()
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = mem.PackRemoteKey()
	require.ErrorIs(t, err, ucs.ErrClosed)

	require.NoError(t, l.Close())
	_, err = l.Accept(waitCtx(t))
	require.ErrorIs(t, err, ucs.ErrClosed)

	require.NoError(t, w.Close())
	require.NoError(t, w.Close())
	_, err = w.Progress()
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = w.PackAddress()
	require.ErrorIs(t, err, ucs.ErrClosed)
	require.ErrorIs(t, w.Wait(waitCtx(t)), ucs.ErrClosed)
	_, err = w.ConnectWorker(addr)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = w.Listen("127.0.0.1:0")
	require.ErrorIs(t, err, ucs.ErrClosed)
	require.ErrorIs(t, w.SetAMHandler(1, func(*ucp.AMMessage) {}), ucs.ErrClosed)

	require.NoError(t, peer.Close())
	require.NoError(t, ctx.Close())
	require.NoError(t, ctx.Close())
	_, err = ctx.NewWorker()
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = ctx.Allocate(8)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = ctx.Info()
	require.ErrorIs(t, err, ucs.ErrClosed)
}

// The measured UCX 1.18 behaviour: with UCP_FEATURE_EXPORTED_MEMH and only
// AM-emulated RMA transports, an endpoint to another worker is unreachable;
// the error says why.
func TestExportedMemhFeatureUnreachableExplained(t *testing.T) {
	p := newPair(t, withContext(ucp.WithFeatures(ucp.FeatureRMA|ucp.FeatureAM|ucp.FeatureExportedMemh)), unconnected())
	addr, err := p.server.PackAddress()
	require.NoError(t, err)
	ep, err := p.client.ConnectWorker(addr)
	if err == nil {
		closeEP(t, ep)
		t.Skip("a native RMA transport reaches the peer here; the UNREACHABLE case needs a machine without one")
	}
	require.ErrorIs(t, err, ucs.ErrUnreachable)
	assert.Contains(t, err.Error(), "UCP_FEATURE_EXPORTED_MEMH")
}

// TestAllocateMoreThanMemory: a length no machine here can hold is refused
// before UCX sees it (UCX's posix allocator filled /dev/shm with 1<<62 until
// the kernel killed the process).
func TestAllocateMoreThanMemory(t *testing.T) {
	ctx := newContext(t)
	for _, n := range []int{1 << 62, math.MaxInt} {
		m, err := ctx.Allocate(n)
		require.ErrorIs(t, err, ucs.ErrNoMemory, "%d bytes", n)
		require.Nil(t, m)
		require.ErrorContains(t, err, "more than this machine's memory")
	}
}
