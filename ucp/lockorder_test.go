package ucp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// A handler that panics: the panic reaches the goroutine whose progress
// ran it, and the worker goes on dispatching, the messages that came with
// the panicking one and later ones alike. The dispatcher used to unlock
// the worker's lock it did not hold on the way out, a fatal error
// ("sync: unlock of unlocked mutex") that no recover stops.
func TestAMHandlerPanicLeavesDispatchWorking(t *testing.T) {
	p := newPair(t, runClient())
	const id ucp.AMID = 9
	got := make(chan string, 8)
	require.NoError(t, p.server.SetAMHandler(id, func(m *ucp.AMMessage) {
		if string(m.Header) == "panic" {
			panic("handler panics")
		}
		got <- string(m.Header)
	}))
	send := func(h string) {
		req, err := p.ep.SendAM(id, []byte(h), nil, 0)
		require.NoError(t, err)
		req.Detach() // completes once the server's progress took it
	}
	// progress progresses the server until want arrives, and returns what
	// the panics recovered meanwhile.
	progress := func(want string) (recovered []any) {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			func() {
				defer func() {
					if r := recover(); r != nil {
						recovered = append(recovered, r)
					}
				}()
				p.server.Progress()
			}()
			select {
			case h := <-got:
				require.Equal(t, want, h)
				return recovered
			default:
			}
		}
		t.Fatalf("message %q not dispatched", want)
		return nil
	}

	// Sent together, they may arrive in one progress round.
	send("panic")
	send("with it")
	require.Equal(t, []any{"handler panics"}, progress("with it"))
	send("later")
	require.Empty(t, progress("later"))
}

// Request.Test progresses the worker, and the handlers that progress
// brings run without the request's lock: a handler may look at the very
// request being tested. Test used to run them under it, and a handler's
// Done on the request deadlocked the goroutine.
func TestHandlerMayUseTheRequestBeingTested(t *testing.T) {
	p := newPair(t, connectBack(), runServer())
	// The client's send stays in flight: its rendezvous data waits in a
	// queue nobody reads until the end.
	q, err := p.server.OpenAMQueue(11)
	require.NoError(t, err)
	defer q.Close()
	send, err := p.ep.SendAM(11, nil, make([]byte, 1<<20), ucp.AMRndv)
	require.NoError(t, err)

	doneSeen := make(chan bool, 1)
	require.NoError(t, p.client.SetAMHandler(10, func(*ucp.AMMessage) {
		doneSeen <- send.Done() // the request Test is testing
	}))
	ping, err := p.sep.SendAM(10, []byte("ping"), nil, 0)
	require.NoError(t, err)
	ping.Detach()

	tested := make(chan error, 1)
	go func() {
		for {
			done, err := send.Test()
			if done || err != nil {
				tested <- err
				return
			}
			select {
			case <-time.After(time.Millisecond):
			case seen := <-doneSeen:
				doneSeen <- seen
				tested <- nil
				return
			}
		}
	}()
	select {
	case err := <-tested:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Request.Test did not return: a handler it ran waits for the request's lock, which Test holds")
	}
	require.False(t, <-doneSeen, "the send waits for the queue")

	// Nobody progresses the client from here but this: its rendezvous
	// send may not have left yet (the Test loop above may end first).
	defer progressWhile(p.client)()
	m, err := q.Receive(waitCtx(t))
	require.NoError(t, err)
	m.Drop()
	require.NoError(t, send.Wait(waitCtx(t)))
}

// A handler run by a wait inside AcceptRequest may close that listener (a
// "shut down" message, say): the Accept ends with ucs.ErrClosed. The
// Accept used to hold the listener entered across its wait, and the
// Close, which waits for operations in flight, then waited for its own
// goroutine.
func TestHandlerMayCloseTheListenerAcceptWaitsOn(t *testing.T) {
	p := newPair(t, listening(), runClient())
	const shutdown ucp.AMID = 12
	require.NoError(t, p.server.SetAMHandler(shutdown, func(*ucp.AMMessage) {
		p.listener.Close()
	}))
	accepted := make(chan error, 1)
	go func() {
		_, err := p.listener.AcceptRequest(context.Background())
		accepted <- err
	}()
	req, err := p.ep.SendAM(shutdown, nil, nil, 0)
	require.NoError(t, err)
	req.Detach()
	select {
	case err := <-accepted:
		require.ErrorIs(t, err, ucs.ErrClosed)
	case <-time.After(20 * time.Second):
		t.Fatal("AcceptRequest did not return: the listener's Close in a handler it ran waits for it")
	}
}
