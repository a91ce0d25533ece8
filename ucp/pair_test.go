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

func newPair(t *testing.T, tls string, peerErr bool) *pair {
	t.Helper()
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", tls))
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

	saddr, err := p.server.Address()
	require.NoError(t, err)
	p.ep, err = p.client.ConnectAddress(saddr, ucp.WithPeerErrorHandling(peerErr))
	require.NoError(t, err)
	t.Cleanup(func() { closeEP(t, p.ep) })
	return p
}

// runWorker progresses w in a goroutine until the test ends.
func runWorker(t *testing.T, w *ucp.Worker) {
	run, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(run) }()
	t.Cleanup(func() { cancel(); <-done })
}

func closeEP(t *testing.T, ep *ucp.Endpoint) {
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
			target, err := p.ctx.MemMap(ucp.Allocate(size))
			require.NoError(t, err)
			defer target.Close()
			packed, err := target.PackRkey()
			require.NoError(t, err)
			rkey, err := p.ep.UnpackRkey(packed)
			require.NoError(t, err)
			defer rkey.Close()

			local, err := p.ctx.MemMap(ucp.Allocate(size))
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
