package ucp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// TestUnpackRightAfterConnect is the first program a newcomer writes:
// connect through a listener, unpack the peer's key at once, put, get.
// UCX bound such a key to the endpoint's configuration of before wire-up
// finished and aborted the process in 13 of 18 runs (issue 12, item 1).
// Each round runs in a child process so that an abort fails the round
// instead of the test binary.
func TestUnpackRightAfterConnect(t *testing.T) {
	// 10 runs: a crash in 13 of 18 runs would pass them all 1 time in
	// 350,000, one in 3 runs 1 time in 60.
	testproc.RunRounds(t, "TestUnpackRightAfterConnectOnce", 2, 5)
}

func TestUnpackRightAfterConnectOnce(t *testing.T) {
	testproc.RepeatInChild(t, unpackRightAfterConnect)
}

func unpackRightAfterConnect(t *testing.T) {
	p := newPair(t, viaListener(), runClient())
	runWorker(t, p.server)
	target, rkey := p.mapTarget(t, 4096)
	want := bytes.Repeat([]byte{0x5a}, 64)
	req, err := putAt(want, target.Address(), rkey)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	got := make([]byte, len(want))
	req, err = getAt(got, target.Address(), rkey)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	assert.Equal(t, want, got)
}

// TestCloseInNaturalOrderWithUnflushedPut: put, wait for local completion,
// then close what a newcomer has in the order it comes to mind, starting
// with the target mapping (issue 12, item 3 reported a SIGSEGV in the
// endpoint's release every time; this order over tcp and over shared
// memory has not crashed here since the wire-up wait in UnpackRemoteKey).
func TestCloseInNaturalOrderWithUnflushedPut(t *testing.T) {
	// 2 runs: the crash was met in every run.
	testproc.RunRounds(t, "TestCloseInNaturalOrderWithUnflushedPutOnce", 1, 2)
}

func TestCloseInNaturalOrderWithUnflushedPutOnce(t *testing.T) {
	testproc.RepeatInChild(t, func(t *testing.T) {
		for _, peerErr := range []bool{true, false} { // tcp, then shared memory
			t.Run(fmt.Sprintf("peer-error-handling=%v", peerErr), func(t *testing.T) { closeInNaturalOrder(t, peerErr) })
		}
	})
}

func closeInNaturalOrder(t *testing.T, peerErr bool) {
	p := newPair(t, viaListener(), withPeerErr(peerErr), runClient())
	ctx, server, client, listener, ep, sep := p.ctx, p.server, p.client, p.listener, p.ep, p.sep
	runWorker(t, server)
	target, rkey := p.mapTarget(t, 1<<16)
	req, err := putAt(bytes.Repeat([]byte{1}, 1<<16), target.Address(), rkey)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))

	require.NoError(t, target.Close())
	assert.NoError(t, ep.Close(waitCtx(t), ucp.CloseFlush))
	require.NoError(t, rkey.Close())
	require.NoError(t, listener.Close())
	assert.NoError(t, sep.Close(waitCtx(t), ucp.CloseForce))
	require.NoError(t, server.Close())
	require.NoError(t, client.Close())
	require.NoError(t, ctx.Close())
}

// TestFlippedBitInPeerKey: one bit flipped in a peer's packed key, then
// UnpackRemoteKey. A flip in the System V part's segment id made UCX fail
// its attach and crash (SIGSEGV, 2 of 4 runs under -race; issue 12, item
// 0), one in a size byte moved the System V reader onto other bytes
// (SIGSEGV 20 of 20), and one setting the posix part's HUGETLB flag made
// UCX refuse the mapping and then crash, or fail an assertion in
// ucp_cleanup (pgtable.c:529), cleaning up the half-unpacked key. Every bit
// of the whole key is flipped in turn, for keys of System V and of posix
// shared memory and one of registered Go memory: each must give a key or
// an error, never a crash.
func TestFlippedBitInPeerKey(t *testing.T) {
	// 6 runs, each of every bit: at 2 crashes in 4 runs all 6 pass 1 time
	// in 64.
	testproc.RunRounds(t, "TestFlippedBitInPeerKeyOnce", 2, 3)
}

func TestFlippedBitInPeerKeyOnce(t *testing.T) {
	testproc.RepeatInChild(t, func(t *testing.T) {
		flipEveryBitOfKey(t, "md:sysv")
		flipEveryBitOfKey(t, "md:posix")
	})
}

// TestAMToWorkerWithoutHandler: active messages to ids the receiving
// worker has no handler for (it never had one; the largest id; one past a
// handler set later) are dropped, eager and rendezvous, and the worker
// goes on serving. UCX 1.16 to 1.20 look the handler up by the peer's id
// unchecked: a message to a worker that never had a handler crashed it
// (SIGSEGV in ucp_am_handler, 20 of 20 runs on 1.18.1).
func TestAMToWorkerWithoutHandler(t *testing.T) {
	// 1 run: the crash was met in every run.
	testproc.RunRounds(t, "TestAMToWorkerWithoutHandlerOnce", 1, 1)
}

func TestAMToWorkerWithoutHandlerOnce(t *testing.T) {
	testproc.RepeatInChild(t, func(t *testing.T) {
		for _, peerErr := range []bool{true, false} { // tcp, shared memory
			p := newPair(t, onTLS("posix,sysv,self,tcp"), withPeerErr(peerErr), runServer())
			host, ep := p.server, p.ep
			// UCX answers a rendezvous message nobody handles with
			// UCS_ERR_INVALID_PARAM at the sender (every release); an
			// eager one is dropped.
			send := func(id ucp.AMID, data []byte) {
				req, err := ep.SendAM(id, []byte("h"), data, 0)
				require.NoError(t, err)
				if err := req.Wait(waitCtx(t)); err != nil {
					require.ErrorIs(t, err, ucs.ErrInvalidParam, "id %d, %d bytes", id, len(data))
					require.Greater(t, len(data), 1<<16, "an eager message failed")
				}
			}
			for _, id := range []ucp.AMID{9, 65535} {
				send(id, []byte("x"))
				send(id, make([]byte, 1<<20)) // rendezvous
			}
			q, err := host.OpenAMQueue(3)
			require.NoError(t, err)
			defer q.Close()
			send(9, []byte("x"))
			send(3, []byte("served"))
			msg, err := q.Receive(waitCtx(t))
			require.NoError(t, err)
			assert.Equal(t, "served", string(msg.Data))
			require.NoError(t, ep.Flush(waitCtx(t)))
		}
	})
}

// TestFlippedBitInWorkerAddress: one bit flipped in a peer's worker
// address, or the address cut short, then ConnectWorker. UCX reads its
// address unchecked: flipped header bits aborted the process (address.c,
// 1.18.1 and 1.22.0, 4 of 4) and one in a tcp address crashed it in
// ucp_ep_create (3 of 4). Every damaged address is refused before UCX
// reads it; the intact one, and its UCX bytes packed again, connect.
func TestFlippedBitInWorkerAddress(t *testing.T) {
	for _, tls := range []string{"posix,sysv,self", "tcp"} {
		p := newPair(t, onTLS(tls), unconnected())
		ctx, server, client := p.ctx, p.server, p.client
		peerErr := ucp.WithPeerErrorHandling(tls == "tcp") // shared memory has none
		addr, err := server.PackAddress()
		require.NoError(t, err)
		for i := range addr {
			for bit := range 8 {
				flipped := bytes.Clone(addr)
				flipped[i] ^= 1 << bit
				_, err := client.ConnectWorker(flipped)
				require.ErrorIs(t, err, ucs.ErrInvalidParam, "%s: byte %d bit %d", tls, i, bit)
			}
			_, err := client.ConnectWorker(addr[:i])
			require.ErrorIs(t, err, ucs.ErrInvalidParam, "%s: cut to %d bytes", tls, i)
		}
		raw := addr.UCX()
		require.NotEmpty(t, raw)
		assert.Equal(t, addr, ucp.WorkerAddressFromUCX(raw), "UCX bytes packed again")
		bad := bytes.Clone(raw)
		bad[0] |= 0x0e // an address format version UCX does not know
		_, err = client.ConnectWorker(ucp.WorkerAddressFromUCX(bad))
		require.ErrorIs(t, err, ucs.ErrInvalidParam)
		assert.Contains(t, err.Error(), "address format version")
		runWorker(t, server)
		ep, err := client.ConnectWorker(ucp.WorkerAddressFromUCX(raw), peerErr)
		require.NoError(t, err)
		require.NoError(t, ep.Flush(waitCtx(t)))
		closeEP(t, ep)
		require.NoError(t, client.Close())
		require.NoError(t, server.Close())
		require.NoError(t, ctx.Close())
	}
}

func flipEveryBitOfKey(t *testing.T, allocPrio string) {
	p := newPair(t, withContext(ucp.WithConfig("ALLOC_PRIO", allocPrio)), runServer())
	ep := p.ep
	shared := p.allocate(t, 4096)
	registered, err := p.ctx.Register(make([]byte, 4096))
	require.NoError(t, err)
	defer registered.Close()
	for _, mem := range []*ucp.Mem{shared, registered} {
		packed, err := mem.PackRemoteKey()
		require.NoError(t, err)
		for i := range packed {
			for bit := range 8 {
				flipped := bytes.Clone(packed)
				flipped[i] ^= 1 << bit
				rk, err := ep.UnpackRemoteKey(waitCtx(t), flipped)
				if err == nil {
					rk.Close()
				}
			}
		}
	}
}

// TestCloseWhileRunSleeps: Worker.Close while Run sleeps on the idle
// worker wakes it, and Run returns ucs.ErrClosed (issue 12, item 4: Run
// waited out its sleep and returned nil).
func TestCloseWhileRunSleeps(t *testing.T) {
	ctx := newContext(t)
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	time.Sleep(100 * time.Millisecond) // Run is asleep on the idle worker by now
	require.NoError(t, w.Close())
	select {
	case err := <-ran:
		require.ErrorIs(t, err, ucs.ErrClosed)
		assert.Contains(t, err.Error(), "ucp: run worker")
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end after Close")
	}
}

// TestCloseWakesAccept: an Accept without a deadline ends with ucs.ErrClosed
// when its listener or its worker is closed (the worker's Close left it
// asleep for good: nothing progresses a closed worker for its listener).
func TestCloseWakesAccept(t *testing.T) {
	for _, closeWorker := range []bool{false, true} {
		ctx := newContext(t, ucp.WithConfig("TLS", "tcp"))
		w, err := ctx.NewWorker()
		require.NoError(t, err)
		l, err := w.Listen("127.0.0.1:0")
		require.NoError(t, err)
		accepted := make(chan error, 1)
		go func() {
			_, err := l.Accept(context.Background())
			accepted <- err
		}()
		time.Sleep(100 * time.Millisecond) // Accept is asleep by now
		if closeWorker {
			require.NoError(t, w.Close())
		} else {
			require.NoError(t, l.Close())
		}
		select {
		case err := <-accepted:
			require.ErrorIs(t, err, ucs.ErrClosed, "worker closed: %v", closeWorker)
			assert.Contains(t, err.Error(), "ucp: accept on listener")
		case <-time.After(10 * time.Second):
			t.Fatalf("Accept did not end after Close (worker closed: %v)", closeWorker)
		}
		require.NoError(t, l.Close())
		require.NoError(t, w.Close())
		require.NoError(t, ctx.Close())
		require.NoError(t, l.Close(), "again, with everything released (it signalled the destroyed worker: SIGSEGV)")
	}
}

// TestConnectTimeoutSaysWhatItAwaited: Connect to a listener whose worker
// nobody progresses (so nobody accepts) runs out its ctx waiting for the
// wire-up; the error names the connect once and says what it waited for,
// and no endpoint is left.
func TestConnectTimeoutSaysWhatItAwaited(t *testing.T) {
	p := newPair(t, onTLS("tcp"), listening(), unconnected()) // nobody progresses the server
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	live := ucs.LiveHandles()
	type connected struct {
		ep  *ucp.Endpoint
		err error
	}
	done := make(chan connected, 1)
	go func() {
		ep, err := p.client.Connect(short, p.listener.Addr().String())
		done <- connected{ep, err}
	}()
	var c connected
	select { // a guard against a hang, not a speed goal
	case c = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("HANG: Connect outlived its ctx")
	}
	ep, err := c.ep, c.err
	require.Nil(t, ep)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	addr := p.listener.Addr().String()
	assert.Equal(t, "ucp: connect to "+addr+": Operation timed out: gave up waiting; the handshake with "+addr+
		" has not finished: the server there has not accepted the connection, or is not progressing its worker, or is not a UCX listener (context deadline exceeded)", err.Error())
	assert.Equal(t, live, ucs.LiveHandles(), "the endpoint was closed")
}

// TestAcceptTimeoutNamesAccept: the error of an Accept that times out names
// Accept and its listener, not an internal wait (issue 12, item 5).
func TestAcceptTimeoutNamesAccept(t *testing.T) {
	ctx := newContext(t)
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	defer w.Close()
	l, err := w.Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	actx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = l.Accept(actx)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.Contains(t, err.Error(), "ucp: accept on listener "+l.Addr().String()+": ")
	assert.NotContains(t, err.Error(), "wait on worker")
	assert.Contains(t, err.Error(), "client's worker is progressed", "says what a newcomer's client forgot")
}

// TestCloseFlushWithSilentPeerSaysWhy: a flush close whose peer does not
// answer (its worker is not progressed: a stopped process, say) cannot
// complete; when ctx ends, the error says why and what to do instead
// (issue 12, item 7: it ran out its ctx with no hint).
func TestCloseFlushWithSilentPeerSaysWhy(t *testing.T) {
	p := newPair(t, onTLS("tcp")) // the server is not progressed until the end
	ep := p.ep
	target, rkey := p.mapTarget(t, 4096)
	req, err := getAt(make([]byte, 8), target.Address(), rkey)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = ep.Close(cctx, ucp.CloseFlush)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.Contains(t, err.Error(), "ucp: close endpoint (flush)")
	assert.Contains(t, err.Error(), "the peer did not complete the flush")
	assert.Contains(t, err.Error(), "CloseForce")

	runWorker(t, p.server) // the peer answers: the get and the close finish
	assert.NoError(t, req.Wait(waitCtx(t)), "the get completes once the peer progresses")
}

// TestCloseFlushAfterPeerClosedAndStopped: the client closes its end and
// its worker is progressed no more (its program moved on); the server
// then closes its end the natural way. The close ends well within its ctx,
// whether UCX has reported the client's close yet or not, and says the peer
// closed (it said its own CloseForce had canceled the flush).
func TestCloseFlushAfterPeerClosedAndStopped(t *testing.T) {
	p := newPair(t, onTLS("tcp"), viaListener(), runServer(), runClient())
	cep, sep := p.ep, p.sep
	require.NoError(t, cep.Flush(waitCtx(t)))
	p.clientRun.stop()
	require.NoError(t, cep.Close(waitCtx(t), ucp.CloseFlush))

	start := time.Now()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := sep.Close(cctx, ucp.CloseFlush)
	t.Logf("server close after %v: %v", time.Since(start), err)
	if err != nil {
		assert.ErrorIs(t, err, ucs.ErrConnectionReset)
		assert.Contains(t, err.Error(), "the peer closed its end")
	}
	assert.ErrorIs(t, sep.Flush(waitCtx(t)), ucs.ErrClosed)
}

// TestForceCloseRightAfterConnect: connect through a listener and, on
// second thought, force-close at once, 100 times a round, while the server
// accepts and force-closes its ends; the descriptors stay level. Before
// CloseForce waited for the handshake, UCX 1.18.1's connection manager
// aborted the process (tcp_sockcm_ep.c:416) in 3 of 50 runs of 200 such
// connections, and in 9 of 60 with a server that did not accept.
func TestForceCloseRightAfterConnect(t *testing.T) {
	// 100 connections: the abort (3 in 50 runs of 200) is rarer than make
	// test can prove cheaply (its 100 would meet it 1 time in 33); make
	// stress runs rounds of 100 for its budget.
	testproc.RunRounds(t, "TestForceCloseRightAfterConnectOnce", 1, 1)
}

func TestForceCloseRightAfterConnectOnce(t *testing.T) {
	testproc.RepeatInChild(t, forceCloseRightAfterConnect)
}

func forceCloseRightAfterConnect(t *testing.T) {
	p := newPair(t, listening(), unconnected())
	client, l := p.client, p.listener

	accepting, stop := context.WithCancel(context.Background())
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			ep, err := l.Accept(accepting)
			if err != nil {
				return
			}
			closing, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ep.Close(closing, ucp.CloseForce)
			cancel()
		}
	}()
	defer func() { stop(); <-accepted }()

	// Nothing else progresses the client's worker: Close does.
	fds := openFDs(t)
	for i := range 100 {
		// The server closes its side at once: Connect may see that (a
		// reset) or return first; either way nothing is left open.
		connecting, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ep, err := client.Connect(connecting, l.Addr().String())
		cancel()
		if err != nil {
			require.Nil(t, ep)
			require.ErrorContains(t, err, "ucp: connect to")
		} else {
			closing, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = ep.Close(closing, ucp.CloseForce)
			cancel()
			require.True(t, err == nil || errors.Is(err, ucs.ErrConnectionReset), "%v", err)
		}
		// The server's end may still be closing: a few descriptors of slack.
		require.LessOrEqual(t, openFDs(t), fds+6, "after %d cycles", i+1)
	}
}

// TestForceCloseRightAfterPuts: over tcp, where UCX emulates puts with
// active messages that the server acknowledges, put 4 times (waiting for
// local completion or not) and force-close at once. UCX 1.18.1 once
// aborted the server about 1 run in 3 (ucs_fatal "Endpoint timeout" in
// ucp_put_handler: the acknowledgement went to the closed endpoint); see
// the known issues in docs/behaviour.md. UCXGO_ROUNDS=40 repeats the measured run
// (800 force closes).
func TestForceCloseRightAfterPuts(t *testing.T) {
	// 10 runs: an abort one run in 3 would pass them all 1 time in 60.
	testproc.RunRounds(t, "TestForceCloseRightAfterPutsOnce", 1, 10)
}

func TestForceCloseRightAfterPutsOnce(t *testing.T) {
	testproc.RepeatInChild(t, func(t *testing.T) {
		for _, wait := range []bool{true, false} {
			forceCloseRightAfterPuts(t, wait)
		}
	})
}

func forceCloseRightAfterPuts(t *testing.T, wait bool) {
	p := newPair(t, onTLS("tcp"), viaListener(), runClient())
	runWorker(t, p.server)
	target, rkey := p.mapTarget(t, 4096)
	var reqs []ucp.Request
	for range 4 {
		req, err := putAt(make([]byte, 2000), target.Address(), rkey)
		require.NoError(t, err)
		if wait {
			require.NoError(t, req.Wait(waitCtx(t)))
		}
		reqs = append(reqs, req)
	}
	require.NoError(t, p.ep.Close(waitCtx(t), ucp.CloseForce))
	for _, req := range reqs {
		// Done or canceled by the force close: either way it ends.
		if err := req.Wait(waitCtx(t)); err != nil {
			require.ErrorIs(t, err, ucs.ErrCanceled)
		}
	}
}

// TestForceCloseGetToStalledPeer: a get to a peer that does not progress,
// then CloseForce, which waits its 1 s grace for the get and forces it;
// then the peer progresses and its reply arrives. A reply after a force
// close made UCX fail an assertion (flush_ops_count >= 0, in
// ucp_get_rep_handler) where the close purged the get (see CloseForce);
// here, without peer error handling UCX does not purge it and it
// completes, and with peer error handling it ends canceled.
func TestForceCloseGetToStalledPeer(t *testing.T) {
	// 1 run: each of its cases waits out a force close's 1 s grace.
	testproc.RunRounds(t, "TestForceCloseGetToStalledPeerOnce", 1, 1)
}

func TestForceCloseGetToStalledPeerOnce(t *testing.T) {
	testproc.RepeatInChild(t, func(t *testing.T) {
		for _, c := range []struct {
			tls     string
			peerErr bool
		}{{"tcp", false}, {"tcp", true}, {"posix,sysv,self", false}} {
			for _, n := range []int{8, 1 << 20} {
				t.Run(fmt.Sprintf("%s/peerErr=%v/%d", c.tls, c.peerErr, n), func(t *testing.T) {
					t.Parallel() // each waits out the force close's grace
					forceCloseGetToStalledPeer(t, c.tls, c.peerErr, n)
				})
			}
		}
	})
}

func forceCloseGetToStalledPeer(t *testing.T, tls string, peerErr bool, n int) {
	p := newPair(t, onTLS(tls), withPeerErr(peerErr), runClient())
	ep := p.ep
	target, rkey := p.mapTarget(t, n)
	want, err := target.Bytes() // its length may be over n
	require.NoError(t, err)
	for i := range want {
		want[i] = byte(i*7 + 1)
	}

	got := make([]byte, n)
	req, err := getAt(got, target.Address(), rkey)
	require.NoError(t, err)
	require.NoError(t, ep.Close(waitCtx(t), ucp.CloseForce))
	runWorker(t, p.server) // the stalled peer wakes up and answers
	err = req.Wait(waitCtx(t))
	if peerErr {
		require.ErrorIs(t, err, ucs.ErrCanceled)
		return
	}
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want[:n], got), "the get read what the target holds")
}

// TestCloseListenerWhileClientsConnect: a server shuts down, closing its
// listener while four clients connect, flush and force-close in a loop;
// its accept loop, which stops at the first error, must end with the
// close and not before. UCX delivered a connection taken before
// ucp_listener_destroy to the freed listener: SIGSEGV in
// ucp_cm_server_conn_request_cb, 9 of 20 runs on 1.18.1 (and on 1.16.0,
// 1.22.0 and 1.23.0~rc1) before a closed listener stayed in UCX until its
// worker went.
func TestCloseListenerWhileClientsConnect(t *testing.T) {
	// 6 runs: at 9 crashes in 20 runs all 6 pass 1 time in 36.
	testproc.RunRounds(t, "TestCloseListenerWhileClientsConnectOnce", 2, 3)
}

func TestCloseListenerWhileClientsConnectOnce(t *testing.T) {
	testproc.RepeatInChild(t, closeListenerWhileClientsConnect)
}

func closeListenerWhileClientsConnect(t *testing.T) {
	// The server runs its worker, as a service does while it shuts down:
	// the rejections of the requests that come after the close reach the
	// clients (a Connect that fails in its handshake closes its endpoint
	// waiting up to CloseForce's grace).
	p := newPair(t, listening(), unconnected(), runServer())
	ctx, l := p.ctx, p.listener
	addr := l.Addr().String()

	var eps []*ucp.Endpoint
	acceptEnded := make(chan error, 1)
	go func() {
		for {
			ep, err := l.Accept(context.Background())
			if err != nil {
				acceptEnded <- err
				return
			}
			eps = append(eps, ep)
		}
	}()
	var clients sync.WaitGroup
	for range 4 {
		client, err := ctx.NewWorker()
		require.NoError(t, err)
		defer client.Close()
		clients.Add(1)
		go func() {
			defer clients.Done()
			for range 5 {
				wait, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				ep, err := client.Connect(wait, addr)
				cancel()
				if err != nil {
					continue
				}
				wait, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
				ep.Close(wait, ucp.CloseForce)
				cancel()
			}
		}()
	}
	time.Sleep(40 * time.Millisecond)
	require.NoError(t, l.Close())
	require.ErrorIs(t, <-acceptEnded, ucs.ErrClosed)
	clients.Wait()
	closing, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ep := range eps {
		ep.Close(closing, ucp.CloseForce)
	}
}

// TestWorkerCloseInsideHandler: a handler decides the service is done and
// closes its worker. The handler ran inside Run, which the close waits
// for: it hung for good before a close from a handler finished once the
// handler had returned. Close returns at once, Run ends with ErrClosed,
// and the worker's methods fail from the handler on.
func TestWorkerCloseInsideHandler(t *testing.T) {
	p := newPair(t, viaListener(), runClient())
	closed := make(chan error, 1)
	afterClose := make(chan error, 1)
	require.NoError(t, p.server.SetAMHandler(7, func(*ucp.AMMessage) {
		closed <- p.server.Close()
		_, err := p.server.Progress()
		afterClose <- err
	}))
	running, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan error, 1)
	server := p.server
	go func() { ran <- server.Run(running) }()
	req, err := p.ep.SendAM(7, nil, []byte("done"), 0)
	require.NoError(t, err)
	defer req.Detach()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's Close did not return")
	}
	require.ErrorIs(t, <-afterClose, ucs.ErrClosed)
	select {
	case err := <-ran:
		require.ErrorIs(t, err, ucs.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end after the handler closed its worker")
	}
}

// TestHandlerCallsWorkerDuringClose: another goroutine closes the worker
// while a handler runs, and the handler then calls the worker. The close
// waits for the Run that runs the handler; the handler's call must fail
// with ErrClosed, not queue behind the close (a deadlock).
func TestHandlerCallsWorkerDuringClose(t *testing.T) {
	p := newPair(t, viaListener(), runClient())
	inHandler := make(chan struct{})
	closeStarted := make(chan struct{})
	handlerCall := make(chan error, 1)
	require.NoError(t, p.server.SetAMHandler(7, func(*ucp.AMMessage) {
		close(inHandler)
		<-closeStarted
		_, err := p.server.Progress()
		handlerCall <- err
	}))
	runWorker(t, p.server)
	closed := make(chan error, 1)
	server := p.server
	go func() {
		<-inHandler
		time.AfterFunc(50*time.Millisecond, func() { close(closeStarted) })
		closed <- server.Close()
	}()
	req, err := p.ep.SendAM(7, nil, []byte("x"), 0)
	require.NoError(t, err)
	defer req.Detach()
	select {
	case err := <-handlerCall:
		require.ErrorIs(t, err, ucs.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's call waited behind the close")
	}
	require.NoError(t, <-closed)
}

// TestCloseNilHandles: cleanup code closes what it may never have got
// (a deferred Close after a failed constructor, a zero struct field).
func TestCloseNilHandles(t *testing.T) {
	var (
		ctx *ucp.Context
		w   *ucp.Worker
		l   *ucp.Listener
		ep  *ucp.Endpoint
		m   *ucp.Mem
		rk  *ucp.RemoteKey
		q   *ucp.AMQueue
		lr  *ucp.LocalRegion
	)
	assert.NoError(t, ctx.Close())
	assert.NoError(t, w.Close())
	assert.NoError(t, l.Close())
	assert.NoError(t, ep.Close(context.Background(), ucp.CloseForce))
	assert.NoError(t, m.Close())
	assert.NoError(t, rk.Close())
	assert.NoError(t, q.Close())
	assert.NoError(t, lr.Close())
	assert.NoError(t, new(ucp.Context).Close())
	assert.NoError(t, new(ucp.Worker).Close())
	assert.NoError(t, new(ucp.Listener).Close())
	assert.NoError(t, new(ucp.Endpoint).Close(context.Background(), ucp.CloseFlush))
	assert.NoError(t, new(ucp.RemoteKey).Close())
	assert.NoError(t, new(ucp.LocalRegion).Close())
}

// TestOwnerClosesWhilePeerReads: the memory's owner closes its endpoint
// (CloseFlush, the natural choice) while the peer loops ReadAtContext
// over tcp. UCX's flush close kept serving the peer's gets on the closing
// endpoint and aborted the owner (ucs_fatal "Endpoint timeout" in
// ucp_get_req_handler) in 4 of 15 rounds of 5 on 1.18.1, 4 of 15 runs on
// 1.23.0~rc1. Every read that succeeds returns the owner's bytes, and
// the peer's endpoint then fails with ErrConnectionReset.
func TestOwnerClosesWhilePeerReads(t *testing.T) {
	// 20 runs: the abort (4 in 15 rounds of 5 runs) would pass them all 1
	// time in 3, so make stress is the run that proves it.
	testproc.RunRounds(t, "TestOwnerClosesWhilePeerReadsOnce", 4, 5)
}

func TestOwnerClosesWhilePeerReadsOnce(t *testing.T) {
	testproc.RepeatInChild(t, ownerClosesWhilePeerReads)
}

func ownerClosesWhilePeerReads(t *testing.T) {
	p := newPair(t, onTLS("tcp"), viaListener(), runClient(), runServer())
	mem, region := p.mapRegion(t, 1<<16)
	b, err := mem.Bytes()
	require.NoError(t, err)
	copy(b, pattern(len(b), 7))

	readErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<16)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := region.ReadAtContext(ctx, buf, 0)
			cancel()
			if err != nil {
				readErr <- err
				return
			}
			if !bytes.Equal(buf, pattern(len(buf), 7)) {
				readErr <- errors.New("a read returned other bytes than the owner's")
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond) // the reads are under way
	require.NoError(t, p.sep.Close(waitCtx(t), ucp.CloseFlush))
	err = <-readErr
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "other bytes")
	select {
	case <-p.ep.Failed():
		assert.ErrorIs(t, p.ep.Err(), ucs.ErrConnectionReset)
	case <-time.After(5 * time.Second):
		t.Fatal("the reader's endpoint did not fail after the owner closed")
	}
}
