package ucp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// A peer killed while both sides stream at each other: the test process
// puts into, gets from and sends active messages to a child, the child puts
// into and sends active messages to the test process, and the child is
// killed with SIGKILL mid-stream. The child does not get: over tcp a get is
// served by the target's progress, and UCX (1.18.1 and 1.23.0~rc1) aborts
// a process that serves a get for a peer that just died (ucs_fatal
// "unexpected error: Endpoint timeout" in ucp_get_req_handler, met in this
// test once in about 15 runs): the known UCX issue of docs/behaviour.md, which a Go
// binding cannot catch.

const (
	streamAddrEnv = "UCXGO_STREAM_ADDR" // the test process's listener
	streamModeEnv = "UCXGO_STREAM_MODE" // "stream" or "serve" (no traffic of its own)
	amStream      = 5                   // streamed messages, both ways
	streamMem     = 4 << 20
	streamChunk   = 64 << 10
	streamWindow  = 4 // operations of each kind in flight per side
)

func init() { testproc.Role("streamer", runStreamer) }

// rkeyHeader is the header of an amRkey message: the memory's address.
func rkeyHeader(m *ucp.Mem) []byte { return binary.LittleEndian.AppendUint64(nil, m.Address()) }

// streamSide is one side's memory and its peer's key.
type streamSide struct {
	ep    *ucp.Endpoint
	mem   *ucp.Mem // local memory the peer reads and writes
	rkey  *ucp.RemoteKey
	raddr uint64
}

// receiveStream handles amStream: eager data is copied, rendezvous data is
// received (the transfer may fail once the sender is gone).
func receiveStream(count *atomic.Int64, wg *sync.WaitGroup) ucp.AMHandler {
	return func(m *ucp.AMMessage) {
		count.Add(1)
		if !m.IsRendezvous() {
			return
		}
		buf := make([]byte, m.Len())
		req, err := m.ReceiveInto(buf)
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req.Wait(ctx)
		}()
	}
}

// stream runs operations of one kind ("put", "get", "am") on s with
// streamWindow in flight until one fails or stop closes; it returns the
// error that ended it and when, and the operations completed.
func stream(s *streamSide, kind string, timeout time.Duration, stop <-chan struct{}, done *atomic.Int64) (error, time.Time) {
	src := pattern(streamChunk, 7)
	bufs := make([][]byte, streamWindow)
	for i := range bufs {
		bufs[i] = make([]byte, streamChunk)
	}
	var inflight []ucp.Request
	for i := 0; ; i++ {
		select {
		case <-stop:
			for j := range inflight {
				inflight[j].Detach()
			}
			return nil, time.Now()
		default:
		}
		off := uint64(i%(streamMem/streamChunk)) * streamChunk
		var req ucp.Request
		var err error
		switch kind {
		case "put":
			req, err = putAt(src, s.raddr+off, s.rkey)
		case "get":
			req, err = getAt(bufs[i%streamWindow], s.raddr+off, s.rkey)
		default:
			n := 1 << 10
			if i%4 == 3 {
				n = 256 << 10 // rendezvous
			}
			data := bytes.Repeat([]byte{byte(i)}, n)
			req, err = s.ep.SendAM(amStream, []byte("s"), data, 0)
		}
		if err != nil {
			for j := range inflight {
				inflight[j].Detach()
			}
			return err, time.Now()
		}
		inflight = append(inflight, req)
		if len(inflight) < streamWindow {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = inflight[0].Wait(ctx)
		cancel()
		inflight = inflight[1:]
		if err != nil {
			for j := range inflight {
				inflight[j].Detach()
			}
			return err, time.Now()
		}
		done.Add(1)
	}
}

// runStreamer is the child: it connects to the test process, trades keys,
// then (mode "stream") streams puts, gets and messages at it until killed,
// or (mode "serve") only serves until stdin closes.
func runStreamer() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "streamer:", err); return 1 }
	ctx, w, err := childWorker()
	if err != nil {
		return fail(err)
	}
	mem, err := ctx.Allocate(streamMem)
	if err != nil {
		return fail(err)
	}
	b, _ := mem.Bytes()
	copy(b, pattern(len(b), 9))
	keys := make(chan []byte, 1)
	raddrs := make(chan uint64, 1)
	if err := w.SetAMHandler(amRkey, func(m *ucp.AMMessage) {
		raddrs <- binary.LittleEndian.Uint64(m.Header)
		keys <- m.Data
	}); err != nil {
		return fail(err)
	}
	var received atomic.Int64
	var receives sync.WaitGroup
	if err := w.SetAMHandler(amStream, receiveStream(&received, &receives)); err != nil {
		return fail(err)
	}
	run, stop := context.WithCancel(context.Background())
	defer stop()
	go w.Run(run)
	ep, err := w.Connect(run, os.Getenv(streamAddrEnv))
	if err != nil {
		return fail(err)
	}
	packed, err := mem.PackRemoteKey()
	if err != nil {
		return fail(err)
	}
	req, err := ep.SendAM(amRkey, rkeyHeader(mem), packed, 0)
	if err == nil {
		err = req.Wait(run)
	}
	if err != nil {
		return fail(err)
	}
	s := &streamSide{ep: ep, mem: mem, raddr: <-raddrs}
	if s.rkey, err = ep.UnpackRemoteKey(context.Background(), <-keys); err != nil {
		return fail(err)
	}
	if os.Getenv(streamModeEnv) != "stream" {
		fmt.Println("SERVING")
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	var done atomic.Int64
	var once sync.Once
	go func() {
		for done.Load() < 2*streamWindow {
			time.Sleep(time.Millisecond)
		}
		once.Do(func() { fmt.Println("STREAMING") })
	}()
	errs := make(chan error, 2)
	for _, kind := range []string{"put", "am"} { // no get: see the top of this file
		go func() {
			err, _ := stream(s, kind, time.Minute, nil, &done)
			errs <- fmt.Errorf("%s: %w", kind, err)
		}()
	}
	return fail(<-errs)
}

// startStreamer starts runStreamer, connecting to addr, in mode "stream"
// or "serve".
func startStreamer(t *testing.T, addr, mode string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Spec{
		Role:   "streamer",
		Env:    []string{streamAddrEnv + "=" + addr, streamModeEnv + "=" + mode},
		Stderr: true,
	})
}

// streamServer is the test process's side: a listener on its worker,
// memory the child streams at, and the handlers.
type streamServer struct {
	w        *ucp.Worker
	l        *ucp.Listener
	mem      *ucp.Mem
	keys     chan []byte
	raddrs   chan uint64
	received atomic.Int64
	receives sync.WaitGroup
}

func newStreamServer(t *testing.T) *streamServer {
	ctx := newContext(t, ucp.WithConfig("TLS", "tcp"))
	srv := &streamServer{keys: make(chan []byte, 1), raddrs: make(chan uint64, 1)}
	var err error
	srv.w, err = ctx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { srv.w.Close() })
	srv.mem, err = ctx.Allocate(streamMem)
	require.NoError(t, err)
	t.Cleanup(func() { srv.mem.Close() })
	require.NoError(t, srv.w.SetAMHandler(amRkey, func(m *ucp.AMMessage) {
		srv.raddrs <- binary.LittleEndian.Uint64(m.Header)
		srv.keys <- m.Data
	}))
	require.NoError(t, srv.w.SetAMHandler(amStream, receiveStream(&srv.received, &srv.receives)))
	t.Cleanup(srv.receives.Wait)
	runWorker(t, srv.w)
	srv.l, err = srv.w.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { srv.l.Close() })
	return srv
}

// accept takes the child's connection and trades keys with it.
func (srv *streamServer) accept(t *testing.T) *streamSide {
	t.Helper()
	cr, err := srv.l.AcceptRequest(waitCtx(t))
	require.NoError(t, err)
	ep, err := cr.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { closeEP(t, ep) })
	packed, err := srv.mem.PackRemoteKey()
	require.NoError(t, err)
	req, err := ep.SendAM(amRkey, rkeyHeader(srv.mem), packed, 0)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	s := &streamSide{ep: ep, mem: srv.mem}
	select {
	case s.raddr = <-srv.raddrs:
	case <-time.After(30 * time.Second):
		t.Fatal("no key from the child")
	}
	s.rkey, err = ep.UnpackRemoteKey(context.Background(), <-srv.keys)
	require.NoError(t, err)
	t.Cleanup(func() { s.rkey.Close() })
	return s
}

// The child is killed while it puts into, gets from and sends messages to
// this process, which does the same to it. Each of this side's streams
// ends with an error within the timeout (not by waiting it out), the
// endpoint reports the failure, later operations are refused, no goroutine
// is left behind, and a new child connecting to the same worker is served.
func TestPeerKilledWhileStreamingBothWays(t *testing.T) {
	leakcheck.Goroutines(t)
	const timeout = 20 * time.Second // the configured bound on each operation
	srv := newStreamServer(t)
	child := startStreamer(t, srv.l.Addr().String(), "stream")
	s := srv.accept(t)

	stop := make(chan struct{})
	var done atomic.Int64
	type end struct {
		kind string
		err  error
		at   time.Time
	}
	ends := make(chan end, 3)
	for _, kind := range []string{"put", "get", "am"} {
		go func() {
			err, at := stream(s, kind, timeout, stop, &done)
			ends <- end{kind, err, at}
		}()
	}
	child.WaitLine(t, "STREAMING", 60*time.Second)
	for done.Load() < 3*streamWindow || srv.received.Load() < 8 {
		time.Sleep(time.Millisecond)
	}
	killed := time.Now()
	require.NoError(t, child.Cmd.Process.Kill())

	for range 3 {
		select {
		case e := <-ends:
			require.Error(t, e.err, "%s stream: ended without an error", e.kind)
			assert.False(t, errors.Is(e.err, ucs.ErrTimedOut), "%s stream waited out its timeout instead of failing: %v", e.kind, e.err)
			assert.Less(t, e.at.Sub(killed), timeout, "%s stream: failed %s after the kill", e.kind, e.at.Sub(killed))
			t.Logf("%s stream: %v, %s after the kill", e.kind, e.err, e.at.Sub(killed).Round(time.Millisecond))
		case <-time.After(2 * timeout):
			close(stop)
			t.Fatal("a stream did not end after the kill")
		}
	}
	select {
	case <-s.ep.Failed():
		t.Logf("endpoint failed %s after the kill: %v", time.Since(killed).Round(time.Millisecond), s.ep.Err())
	case <-time.After(timeout):
		t.Fatal("endpoint failure not reported")
	}
	_, err := putAt([]byte{1}, s.raddr, s.rkey)
	require.Error(t, err, "operations after the failure are refused")
	t.Logf("%d operations of this side completed, %d messages received from the child before it died", done.Load(), srv.received.Load())

	// A new connection to the same listener and worker works.
	next := startStreamer(t, srv.l.Addr().String(), "serve")
	s2 := srv.accept(t)
	next.WaitLine(t, "SERVING", 60*time.Second)
	got := make([]byte, 1<<20)
	req, err := getAt(got, s2.raddr, s2.rkey)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	require.True(t, bytes.Equal(pattern(len(got), 9), got), "get from the new child")
	src := pattern(1<<20, 3)
	req, err = putAt(src, s2.raddr, s2.rkey)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	require.NoError(t, s2.ep.Flush(waitCtx(t)))
	clear(got)
	req, err = getAt(got, s2.raddr, s2.rkey)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	require.True(t, bytes.Equal(src, got), "put then get on the new child")
}
