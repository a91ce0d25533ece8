package ucp_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
)

// pair is two workers of one process connected both ways, the target
// progressed by a goroutine (RMA over shared memory and tcp is emulated
// with active messages and needs the target to progress).
type pair struct {
	ctx            *ucp.Context
	client, server *ucp.Worker
	ep, back       *ucp.Endpoint
}

func newPair(t *testing.T, tls string, peerErr bool, opts ...ucp.ContextOption) *pair {
	t.Helper()
	ctx, err := ucp.NewContext(append([]ucp.ContextOption{ucp.WithConfig("TLS", tls)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { ctx.Close() })
	p := &pair{ctx: ctx}
	p.client, err = ctx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { p.client.Close() })
	p.server, err = ctx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { p.server.Close() })

	runWorker(t, p.server)

	saddr, err := p.server.PackAddress()
	require.NoError(t, err)
	p.ep, err = p.client.ConnectWorker(saddr, ucp.WithPeerErrorHandling(peerErr))
	require.NoError(t, err)
	t.Cleanup(func() { closeEP(t, p.ep) })
	return p
}

// mapTarget allocates size bytes in the pair's context and unpacks their
// key on the client's endpoint; both are closed when the test ends.
func (p *pair) mapTarget(t *testing.T, size int) (*ucp.Mem, *ucp.RemoteKey) {
	t.Helper()
	target, err := p.ctx.Allocate(size)
	require.NoError(t, err)
	t.Cleanup(func() { target.Close() })
	packed, err := target.PackRemoteKey()
	require.NoError(t, err)
	rkey, err := p.ep.UnpackRemoteKey(context.Background(), packed)
	require.NoError(t, err)
	t.Cleanup(func() { rkey.Close() })
	return target, rkey
}

// handleSet is one of every handle, closed by the test in its own order:
// a context, a worker with an endpoint to a peer worker, a mapping and its
// key unpacked on the endpoint.
type handleSet struct {
	ctx     *ucp.Context
	w, peer *ucp.Worker
	addr    []byte // peer's address
	ep      *ucp.Endpoint
	mem     *ucp.Mem
	packed  []byte
	rkey    *ucp.RemoteKey
}

func newHandleSet(t *testing.T) handleSet {
	t.Helper()
	var h handleSet
	var err error
	h.ctx, err = ucp.NewContext()
	require.NoError(t, err)
	h.w, err = h.ctx.NewWorker()
	require.NoError(t, err)
	h.peer, err = h.ctx.NewWorker()
	require.NoError(t, err)
	h.addr, err = h.peer.PackAddress()
	require.NoError(t, err)
	h.ep, err = h.w.ConnectWorker(h.addr, ucp.WithPeerErrorHandling(false))
	require.NoError(t, err)
	h.mem, err = h.ctx.Allocate(4096)
	require.NoError(t, err)
	h.packed, err = h.mem.PackRemoteKey()
	require.NoError(t, err)
	h.rkey, err = h.ep.UnpackRemoteKey(context.Background(), h.packed)
	require.NoError(t, err)
	return h
}

// runWorker progresses w in a goroutine until the test ends.
func runWorker(t testing.TB, w *ucp.Worker) {
	run, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(run) }()
	t.Cleanup(func() { cancel(); <-done })
}

func closeEP(t testing.TB, ep *ucp.Endpoint) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ep.Close(ctx, ucp.CloseForce)
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestPutGetRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name, tls string
		peerErr   bool
	}{{"shm", "posix,sysv,self", false}, {"tcp", "tcp", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.tls, tc.peerErr)
			const size = 16 << 20
			target, rkey := p.mapTarget(t, size)

			local, err := p.ctx.Allocate(size)
			require.NoError(t, err)
			defer local.Close()
			lb, err := local.Bytes()
			require.NoError(t, err)
			tb, err := target.Bytes()
			require.NoError(t, err)

			for _, n := range []int{8, 4 << 10, 1 << 20, 16 << 20} {
				// From mapped memory.
				copy(lb, pattern(n, 1))
				req, err := p.ep.PutMem(local, 0, n, target.Address(), rkey)
				require.NoError(t, err)
				require.NoError(t, req.Wait(waitCtx(t)))
				require.NoError(t, p.ep.Flush(waitCtx(t)))
				require.True(t, bytes.Equal(pattern(n, 1), tb[:n]), "put of %d bytes from mapped memory", n)
				clear(lb[:n])
				req, err = p.ep.GetMem(local, 0, n, target.Address(), rkey)
				require.NoError(t, err)
				require.NoError(t, req.Wait(waitCtx(t)))
				require.True(t, bytes.Equal(pattern(n, 1), lb[:n]), "get of %d bytes into mapped memory", n)

				// From Go slices.
				src := pattern(n, 2)
				req, err = p.ep.Put(src, target.Address(), rkey)
				require.NoError(t, err)
				require.NoError(t, req.Wait(waitCtx(t)))
				require.NoError(t, p.ep.Flush(waitCtx(t)))
				require.True(t, bytes.Equal(src, tb[:n]), "put of %d bytes from a slice", n)
				dst := make([]byte, n)
				req, err = p.ep.Get(dst, target.Address(), rkey)
				require.NoError(t, err)
				require.NoError(t, req.Wait(waitCtx(t)))
				require.True(t, bytes.Equal(src, dst), "get of %d bytes into a slice", n)
			}
		})
	}
}
