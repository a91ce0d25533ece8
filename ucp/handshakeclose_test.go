package ucp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// TestForceCloseLeavesAnUnfinishedHandshakeToTheWorker: a client connects
// to a listener whose worker nobody progresses, so the handshake cannot
// finish, and its Connect gives up. Connect's CloseForce of the endpoint
// waits out its grace for the handshake and then leaves the endpoint to
// the worker instead of force-closing it in the middle of the handshake
// (which aborted UCX's connection manager, tcp_sockcm_ep.c:416): while the
// client's worker runs alone, it still holds the handshake's flush (a
// force close would have ended it). Once the server runs and closes its
// listener, the handshake fails, the worker force-closes the endpoint and
// releases it: nothing is left to the worker, and the client connects
// again to a new listener.
func TestForceCloseLeavesAnUnfinishedHandshakeToTheWorker(t *testing.T) {
	p := newPair(t, listening(), unconnected())
	client := p.client
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := client.Connect(ctx, p.listener.Addr().String())
	cancel()
	require.ErrorIs(t, err, ucs.ErrTimedOut)

	runWorker(t, client)
	time.Sleep(200 * time.Millisecond)
	require.Positive(t, client.Stats().Abandoned, "the unfinished handshake's flush is still the worker's: the endpoint was not force-closed")

	runWorker(t, p.server)
	require.NoError(t, p.listener.Close())
	require.Eventually(t, func() bool { return client.Stats().Abandoned == 0 },
		15*time.Second, 10*time.Millisecond, "the endpoint left to the worker is closed and released")

	l, err := p.server.Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := acceptOne(t, p.server, l)
	ep, err := client.Connect(waitCtx(t), l.Addr().String())
	require.NoError(t, err)
	defer ep.Close(waitCtx(t), ucp.CloseForce)
	hep := accepted()
	defer hep.Close(waitCtx(t), ucp.CloseForce)
}

// TestForceCloseOfAHandshakeNobodyAnswers: the same endpoint left to the
// worker, but the server never answers (nobody progresses it, its
// listener stays open): the worker force-closes the endpoint once the
// limit has passed (shortened here to 300 ms), and releases it.
func TestForceCloseOfAHandshakeNobodyAnswers(t *testing.T) {
	defer ucp.SetHandshakeCloseLimit(300 * time.Millisecond)()
	p := newPair(t, listening(), unconnected())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := p.client.Connect(ctx, p.listener.Addr().String())
	cancel()
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	runWorker(t, p.client)
	require.Eventually(t, func() bool { return p.client.Stats().Abandoned == 0 },
		10*time.Second, 10*time.Millisecond, "the endpoint is force-closed once the limit passed, and released")
}
