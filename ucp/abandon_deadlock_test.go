package ucp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Found by TestNetworkCutMidTransferAndRestored (examples/faults): a request
// abandoned by its waiter (its Wait timed out) holds the remote key it
// uses; if the key is closed meanwhile, that hold is the last reference.
// When UCX completes the request, the worker's progress reaps it with the
// worker lock held (reapAbandonedLocked, called from progressRound) and the
// release of the key takes the same lock (releaseRkey): the progressing
// goroutine deadlocks on itself, and every later user of the worker with it.
//
// Nothing is closed with defer or t.Cleanup: once deadlocked, every close
// would block on the worker mutex and hang the test binary instead of
// failing this test.
func TestAbandonedRequestReleasingLastKeyReferenceDoesNotDeadlock(t *testing.T) {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", "tcp"))
	require.NoError(t, err)
	client, err := ctx.NewWorker()
	require.NoError(t, err)
	server, err := ctx.NewWorker() // not progressed: the get cannot complete yet
	require.NoError(t, err)
	addr, err := server.PackAddress()
	require.NoError(t, err)
	ep, err := client.ConnectWorker(addr)
	require.NoError(t, err)
	target, err := ctx.Allocate(4096)
	require.NoError(t, err)
	packed, err := target.PackRemoteKey()
	require.NoError(t, err)
	rkey, err := ep.UnpackRemoteKey(context.Background(), packed)
	require.NoError(t, err)

	req, err := getAt(make([]byte, 8), target.Address(), rkey)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, req.Wait(wctx), ucs.ErrTimedOut) // abandoned: the worker holds it
	require.NoError(t, rkey.Close())                    // the request's hold is now the last reference

	// Let the get complete, and have the client reap it.
	progressed := make(chan struct{})
	go func() {
		defer close(progressed)
		for range 2000 {
			server.Progress()
			client.Progress()
		}
	}()
	select {
	case <-progressed:
	case <-time.After(30 * time.Second):
		t.Fatal("client.Progress deadlocked: reapAbandonedLocked runs with the worker lock held " +
			"and the abandoned request's release of the last remote-key reference (releaseRkey) takes it again " +
			"(the handles of this test stay open: closing them would block too)")
	}
	closeEP(t, ep)
	require.NoError(t, target.Close())
	require.NoError(t, server.Close())
	require.NoError(t, client.Close())
	require.NoError(t, ctx.Close())
}
