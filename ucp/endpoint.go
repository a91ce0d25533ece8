package ucp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// EndpointOption configures endpoint creation.
type EndpointOption func(*endpointOptions)

type endpointOptions struct{ peerErr bool }

// WithPeerErrorHandling turns UCP_ERR_HANDLING_MODE_PEER on or off (default
// on). On, a peer's failure is reported (Endpoint.Failed) and every pending
// and later operation ends with an error; UCX then avoids transports
// without peer-failure support (posix, sysv, self), so data goes over tcp
// or RDMA. Off, shared memory is used and a dead peer can hang operations.
func WithPeerErrorHandling(on bool) EndpointOption {
	return func(o *endpointOptions) { o.peerErr = on }
}

func endpointOpts(opts []EndpointOption) endpointOptions {
	o := endpointOptions{peerErr: true}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// CloseMode says how Endpoint.Close ends the connection.
type CloseMode int

const (
	// CloseFlush completes outstanding operations, then disconnects. If
	// the peer closed its end or failed first, it disconnects all the same
	// and reports only operations that were lost: see Endpoint.Close for
	// exactly what it returns. On an
	// endpoint made through a listener with peer error handling (the
	// default) it disconnects as CloseForce does once the flush completed:
	// UCX's own flush close kept serving the peer's gets on the closing
	// endpoint and aborted the process when one met its failed transport;
	// the peer's endpoint fails with
	// ucs.ErrConnectionReset either way.
	CloseFlush CloseMode = iota
	// CloseForce drops outstanding operations (they end with an error).
	// It first waits, for up to 1 s (and within Close's ctx), for what UCX
	// must finish before a force close or abort the process: the gets in
	// flight on the endpoint, and the handshake of an endpoint made through
	// a listener that no flush has completed on (docs/behaviour.md, "Known
	// UCX issues met"). What the grace does not finish is forced.
	CloseForce
)

// forceCloseGrace bounds the wait for gets that precedes a force close.
const forceCloseGrace = time.Second

// Endpoint is a connection to a peer worker.
type Endpoint struct {
	res *handle.Resource[endpointState]
	w   *Worker
	c   cgo.Endpoint

	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	id uint64 // tells the endpoint a remote key was unpacked on

	// wiring: made through a listener, and no flush has completed on it
	// yet, so its UCX configuration may still change (see UnpackRemoteKey)
	// and its handshake may be under way (see CloseForce). Shared with the
	// endpoint's state, which Close reads.
	wiring *atomic.Bool
	// handshakeHint says, for an endpoint made through a listener, why a
	// wait may not end before the handshake has: who must answer.
	handshakeHint string

	readers endpointReaders // which reader UCX gives each key part (rkeyreader.go)

	peerErr bool // made with peer error handling (WithPeerErrorHandling)
}

// endpointIDs numbers endpoints (a C address can be reused by a later one).
var endpointIDs atomic.Uint64

// endpointState is what closing the UCX endpoint needs; Close sets the mode
// and ctx, and reads the error, around the release.
type endpointState struct {
	w *Worker
	c cgo.Endpoint
	// ops are the endpoint's operations in flight: a force close waits
	// for its gets, a flush close that met the peer's close asks whether
	// one was lost. A separate allocation: requests given to the worker
	// keep it and must not keep the Endpoint.
	ops     *opsInFlight
	wiring  *atomic.Bool // Endpoint.wiring
	byClose bool         // Close closes the UCX endpoint itself; the release does only for a collected endpoint
	// flushThenForce: CloseFlush flushes, then force-closes (see
	// closeEndpoint); set for an endpoint made through a listener, with
	// peer error handling.
	flushThenForce bool
	peerErr        bool // Endpoint.peerErr
}

// newEndpoint creates an endpoint as how says; a non-empty handshakeHint
// marks one made through a listener (see Endpoint.wiring). created says
// whether UCX was asked, and so took the connection request, if any,
// whatever it answered.
func (w *Worker) newEndpoint(op, handshakeHint string, how endpointCreate) (ep *Endpoint, created bool, err error) {
	if !w.enter() {
		return nil, false, closedError(op)
	}
	defer w.res.Exit()
	peerErr := how.peerErr
	ep = &Endpoint{w: w, failed: make(chan struct{}), id: endpointIDs.Add(1), handshakeHint: handshakeHint, wiring: new(atomic.Bool), peerErr: peerErr}
	ep.wiring.Store(handshakeHint != "")
	if st := w.createEndpoint(ep, how); st != 0 {
		e := &ucs.Error{Op: op, Err: ucs.Status(st)}
		if ucs.Status(st) == ucs.ErrUnreachable && w.ctx.features&FeatureExportedMemh != 0 {
			e.Reason = "the context has UCP_FEATURE_EXPORTED_MEMH, which forbids active-message emulation of RMA; no native RMA transport reaches the peer (create the context without it where no MD can export)"
		}
		return nil, true, e
	}
	ep.res = handle.New(w.res, releaseEndpoint, endpointState{w: w, c: ep.c, ops: new(opsInFlight), wiring: ep.wiring,
		flushThenForce: handshakeHint != "" && peerErr, peerErr: peerErr})
	handle.Track(ep, ep.res)
	return ep, true, nil
}

// ConnectWorker creates an endpoint to the worker whose PackAddress is
// addr. Before UCX reads it, addr is checked, and refused with
// ucs.ErrInvalidParam where it fails: its checksum, then UCX's address
// inside (each length within the bytes, the end where the bytes end,
// attributes UCX computes with), then what each transport this worker has
// would read of it (no address empty or shorter than the transport reads,
// no receive FIFO smaller than its own, memory-domain indices and
// active-message sizes UCX can use). What a transport finds inside a
// well-formed address (an IP address and port, a shared-memory segment
// id, a process id) is the peer's word, as in UCX, and a hostile one can
// still crash this process (docs/behaviour.md, "Not guaranteed"). A worker in
// UCX_UNIFIED_MODE=y cannot check an address and refuses every one with
// ucs.ErrUnsupported.
func (w *Worker) ConnectWorker(addr WorkerAddress, opts ...EndpointOption) (*Endpoint, error) {
	const op = connectWorkerOp
	raw, err := addr.unpack()
	if err != nil {
		return nil, err
	}
	if !w.enter() {
		return nil, closedError(op)
	}
	err = w.checkPeerAddress(raw)
	w.res.Exit()
	if err != nil {
		return nil, err
	}
	o := endpointOpts(opts)
	ep, _, err := w.newEndpoint(op, "", endpointCreate{addr: peerAddressCopy(raw), peerErr: o.peerErr})
	return ep, err
}

// Connect connects to a Listener at addr ("host:port") and returns the
// endpoint once it is wired up (the listener's side accepted it and a
// flush completed through it), as net.Dialer.DialContext returns a
// connected conn; or the error that ended the wire-up (the listener
// rejected the request, nothing answers there, or ctx ended first: its
// error wraps ucs.ErrTimedOut or ucs.ErrCanceled and says what was
// awaited), with the endpoint closed. It progresses the worker while it
// waits, so no Run is needed; the server's side must accept meanwhile
// (Listener.Accept running in another goroutine, or another process).
// An endpoint whose handshake is still under way when ctx ends is closed
// as CloseForce closes it: Connect may return up to that grace (1 s) past
// ctx's end.
func (w *Worker) Connect(ctx context.Context, addr string, opts ...EndpointOption) (*Endpoint, error) {
	op := fmt.Sprintf("ucp: connect to %s", addr)
	ap, err := parseAddrPort(op, addr, false)
	if err != nil {
		return nil, err
	}
	if err := w.checkListenerWireup(op); err != nil {
		return nil, err
	}
	o := endpointOpts(opts)
	hint := fmt.Sprintf("the handshake with %s has not finished: the server there has not accepted the connection, or is not progressing its worker, or is not a UCX listener", ap)
	ep, _, err := w.newEndpoint(op, hint, endpointCreate{sockaddr: ap, peerErr: o.peerErr})
	if err != nil {
		return nil, err
	}
	if err := ep.Flush(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ep.Close(cctx, CloseForce)
		cancel()
		e := &ucs.Error{Op: op}
		var ue *ucs.Error
		if errors.As(err, &ue) {
			e.Err, e.Reason, e.Wrapped = ue.Err, ue.Reason, ue.Wrapped
		} else {
			e.Err, e.Wrapped = ucs.ErrIOError, err
		}
		return nil, e
	}
	return ep, nil
}

// checkFailed delivers an error the shim's handler recorded. Called with
// the worker's lock held (progressRound).
func (ep *Endpoint) checkFailed() {
	if st := ucs.Status(ep.c.Error()); st != ucs.OK {
		ep.failOnce.Do(func() {
			ep.failErr = &ucs.Error{Op: "ucp: endpoint", Err: st, Reason: "peer failure reported by UCX"}
			close(ep.failed)
		})
	}
}

// Failed is closed when UCX reports the peer failed (peer error handling).
func (ep *Endpoint) Failed() <-chan struct{} {
	if ep == nil {
		return nil
	}
	return ep.failed
}

// Err is the peer failure, or nil.
func (ep *Endpoint) Err() error {
	if ep == nil {
		return nil
	}
	select {
	case <-ep.failed:
		return ep.failErr
	default:
		return nil
	}
}

// enter starts an operation on the endpoint; it fails after Close or a
// reported peer failure.
func (ep *Endpoint) enter(op string) error {
	if ep == nil || !ep.res.Enter() {
		return closedError(op)
	}
	if st := ucs.Status(ep.c.Error()); st != ucs.OK {
		ep.res.Exit()
		return &ucs.Error{Op: op, Err: st, Reason: "endpoint failed"}
	}
	return nil
}

// Flush waits until every operation started on the endpoint is complete
// remotely.
func (ep *Endpoint) Flush(ctx context.Context) error {
	const op = "ucp: flush endpoint"
	if err := ep.enter(op); err != nil {
		return err
	}
	r := ep.w.flushEndpoint(ep.c)
	ep.w.res.Ref() // the flush's, dropped by await
	ep.res.Exit()
	if err := ep.w.await(ctx, op, r, nil); err != nil {
		var e *ucs.Error
		if ep.wiring.Load() && errors.As(err, &e) && e.Err == ucs.ErrTimedOut {
			e.Reason = "gave up waiting; " + ep.handshakeHint
		}
		return err
	}
	ep.wiring.Store(false) // a completed flush waited for the wire-up
	return nil
}

// Close disconnects: CloseFlush completes outstanding operations first,
// CloseForce drops them (see CloseForce). It waits (bounded by ctx) for UCX
// to finish. The endpoint is closed whatever Close returns. Remote keys
// unpacked on the endpoint are only good for RMA on it, but belong to its
// worker: closing them after the endpoint is safe.
//
// A flush close returns:
//   - nil once the flush completed: every operation started on the
//     endpoint is complete at the peer;
//   - when the flush could not complete because the endpoint failed (its
//     peer closed its end or failed, before Close was called or during
//     its flush; UCX reports that with peer error handling only): nil if
//     no operation was lost, as net.Conn's Close after the peer's, and
//     otherwise an error wrapping the status UCX reported
//     (ucs.ErrConnectionReset for a peer that closed its end) that counts
//     them. An operation is lost if it is a put, get or active-message
//     send started on the endpoint (the atomics UCX performs only without
//     peer error handling) that did not complete without error, unless
//     its failure was the program's to see before Close was called:
//     returned by its Request's Wait or Test, recorded in a Request that
//     failed as it was started, or given up with Detach and already
//     released by its worker. A put or send whose Request completed
//     without error is complete locally (its data left) and is not lost,
//     even if the peer closed before the data reached it: a Flush that
//     returned nil before the peer's close is what says it did;
//   - when ctx ended first, an error wrapping ucs.ErrTimedOut or
//     ucs.ErrCanceled that says the flush did not complete (without peer
//     error handling, a peer that closed or died is never reported, and
//     its flush close ends so);
//   - otherwise, the close's failure as UCX reports it.
func (ep *Endpoint) Close(ctx context.Context, mode CloseMode) error {
	if ep == nil || ep.res == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	// The call that closes the handle closes the UCX endpoint, with its ctx
	// and mode. It holds the worker meanwhile: the handle's reference on it
	// goes when the handle is closed. The Ref is taken under the handle's
	// lock, by the closing call only, while that reference still holds.
	if !ep.res.CloseWith(func(s *endpointState) { s.byClose = true; s.w.res.Ref() }) {
		return nil
	}
	defer ep.w.res.Release()
	return closeEndpoint(ctx, &ep.res.State, mode)
}

// releaseEndpoint closes the UCX endpoint of an Endpoint garbage collected
// without Close: the close (a flush) is handed to the worker, since a
// cleanup must not block.
func releaseEndpoint(s *endpointState) {
	if !s.byClose {
		closeEndpoint(nil, s, CloseFlush)
	}
}

// closeEndpoint closes the UCX endpoint and waits for UCX to finish within
// ctx; a nil ctx hands the close to the worker instead of waiting.
func closeEndpoint(ctx context.Context, s *endpointState, mode CloseMode) error {
	if mode == CloseFlush && ctx != nil {
		return closeFlush(ctx, s)
	}
	if mode == CloseForce && ctx != nil && s.c.Error() == 0 && s.wiring.Load() {
		waitHandshakeBeforeForce(ctx, s)
	}
	if mode == CloseForce && ctx != nil && s.c.Error() == 0 && s.ops.getsPending() {
		waitGetsBeforeForce(ctx, s)
	}
	_, err := closeUCX(ctx, s, mode == CloseForce)
	return err
}

// closeFlush is CloseFlush with a ctx to wait within: see Close for what
// it returns.
func closeFlush(ctx context.Context, s *endpointState) error {
	// The failures of operations that leave the set from now on count as
	// losses: the program did not see them before Close.
	since := s.ops.failures()
	if s.flushThenForce && s.c.Error() == 0 {
		return flushThenForce(ctx, s, since)
	}
	// UCX's flush close, or a force close if UCX reported the peer's close
	// or failure already.
	peer, err := closeUCX(ctx, s, false)
	if peer == 0 && s.peerErr && err != nil && ctx.Err() == nil {
		// The endpoint failed during the close: UCX calls no error
		// handler for an endpoint it is closing (ucp_ep_set_failed, 1.16
		// to 1.22), and the close's status is the failure's.
		peer = statusOf(err)
	}
	if peer != 0 {
		return peerGone(peer, s.ops.lost(since))
	}
	return err
}

// closeUCX closes the UCX endpoint, by UCX's flush close or with force (a
// failed endpoint: with force), and waits for UCX to finish within ctx; a
// nil ctx hands the close to the worker instead of waiting. peer is the
// status UCX reported for the endpoint (its peer closed or failed) by the
// time the close ended, 0 if none or if the close was handed to the
// worker.
func closeUCX(ctx context.Context, s *endpointState, force bool) (peer cgo.Status, err error) {
	w := s.w
	// The state lets go of the endpoint (under the worker's lock): a later
	// use of s.c is a nil dereference, not a read of what Free releases.
	// What runs once the close completes closes over c, not s: a close
	// left to the worker must not keep s.w reachable.
	c, r, force := w.closeEndpointUCX(s, force)
	if r.P == nil {
		peer = c.Error()
		c.Free()
		if r.St != 0 && !force {
			return peer, &ucs.Error{Op: "ucp: close endpoint", Err: ucs.Status(r.St)}
		}
		if ctx != nil {
			// UCX releases the transport endpoints it discarded (2 file
			// descriptors for tcp before wire-up) on the worker's next
			// progress: with none, a worker whose endpoints are closed in
			// a loop ran out of descriptors and crashed when destroyed.
			w.progress()
		}
		return peer, nil
	}
	w.res.Ref()
	if ctx == nil {
		abandonTo(w.res, r, nil, c.Free)
		return 0, nil
	}
	// The status is read before the free, by the worker's reaper if the
	// close is handed over (it is then not read here): atomic, for that.
	status := new(atomic.Int32)
	err = w.await(ctx, closeFlushOp, r, func() { status.Store(int32(c.Error())); c.Free() })
	if err == nil || force {
		return cgo.Status(status.Load()), nil
	}
	if ctx.Err() != nil {
		return 0, flushTimeout(err, ctx, "the endpoint is closed and its operations end when UCX gives up on them; use CloseForce to drop them at once")
	}
	return cgo.Status(status.Load()), err
}

const closeFlushOp = "ucp: close endpoint (flush)"

// flushTimeout is the error of a flush close whose ctx ended first; then
// says what became of the endpoint.
func flushTimeout(err error, ctx context.Context, then string) error {
	return &ucs.Error{Op: closeFlushOp, Err: err.(*ucs.Error).Err, Wrapped: ctx.Err(),
		Reason: "the peer did not complete the flush before ctx ended (it may be gone or not progressing its worker; without peer error handling a dead peer is never detected); " + then}
}

// statusOf is the UCX status err wraps, 0 if none.
func statusOf(err error) cgo.Status {
	var st ucs.Status
	if errors.As(err, &st) {
		return cgo.Status(st)
	}
	return 0
}

// peerGone is the outcome of a flush close of an endpoint UCX reported
// failed with status peer (its peer closed its end or failed), lost
// operations of the endpoint's not complete without error: nil if none, as
// net.Conn's Close after the peer's, since nothing was left to flush.
func peerGone(peer cgo.Status, lost int) error {
	if lost == 0 {
		return nil
	}
	what := "1 operation"
	if lost > 1 {
		what = fmt.Sprintf("%d operations", lost)
	}
	return &ucs.Error{Op: closeFlushOp, Err: ucs.Status(peer),
		Reason: "the peer closed its end or failed before " + what + " started on the endpoint (puts, gets, active-message sends) completed, which are lost; the endpoint is closed"}
}

// flushThenForce is CloseFlush of an endpoint made through a listener, with
// peer error handling: a flush, then a force close. UCX's own flush close
// leaves the closed endpoint in place until the peer acknowledges the
// disconnect, serving the peer's gets meanwhile, and a get reply on its
// failed transport aborted the process (ucs_fatal in ucp_get_req_handler:
// the owner's flush close while its peer read, 4 of 15 runs of 5 closes,
// UCX 1.18.1); force-closed, the endpoint is gone at once and UCX drops
// such requests. The peer sees the same either way: its endpoint fails
// with ucs.ErrConnectionReset. since is the endpoint's count of failed
// operations when Close was called.
//
// The flush fails when the peer's close or failure meets it, whether
// anything of this endpoint's was outstanding or not: the second of two
// flush closes of a listener pair, nothing outstanding, failed so in 21
// of 24 pairs (UCX 1.18.1). What was outstanding is counted from the
// operations in flight (peerGone).
func flushThenForce(ctx context.Context, s *endpointState, since uint64) error {
	w := s.w
	r := w.flushEndpoint(s.c)
	w.res.Ref() // the flush's, dropped by await
	err := w.await(ctx, closeFlushOp, r, nil)
	if err == nil {
		s.wiring.Store(false) // a completed flush waited for the wire-up
	}
	// Read before the force close, which frees the endpoint's C state.
	peer := s.c.Error()
	if err != nil && peer == 0 && ctx.Err() == nil {
		// UCX can end the flush before it reports the failure, which a
		// transport error has it do on the worker's next progress
		// (ucp_ep_set_failed_schedule).
		w.progress()
		peer = s.c.Error()
	}
	// ctx is done if the flush did not complete: the force close waits no
	// grace, and cancels what is still in flight.
	closeErr := closeEndpoint(ctx, s, CloseForce)
	switch {
	case err != nil && ctx.Err() != nil:
		return flushTimeout(err, ctx, "the endpoint was then force-closed, which ended its operations in flight")
	case err != nil:
		// The peer closed or failed during the flush, which UCX then
		// ended (canceled, say); a flush of an endpoint with peer error
		// handling fails for nothing else.
		if peer == 0 {
			peer = statusOf(err)
		}
		if peer == 0 {
			return err
		}
		return peerGone(peer, s.ops.lost(since))
	}
	return closeErr
}

// waitHandshakeBeforeForce flushes an endpoint still in its handshake, for
// at most forceCloseGrace and within the Close's ctx: see CloseForce. A
// flush that does not complete is left to the worker, and the force close
// ends it.
func waitHandshakeBeforeForce(ctx context.Context, s *endpointState) {
	ctx, cancel := context.WithTimeout(ctx, forceCloseGrace)
	defer cancel()
	r := s.w.flushEndpoint(s.c)
	s.w.res.Ref() // the flush's, dropped by await
	if s.w.await(ctx, "ucp: close endpoint (handshake)", r, nil) == nil {
		s.wiring.Store(false)
	}
}

// waitGetsBeforeForce progresses the worker of a closed endpoint (no
// operation can start on it any more) until its gets in flight are done,
// for at most forceCloseGrace and within the Close's ctx: see CloseForce.
// It starts no UCX request: a flush issued here was measured to stay stuck
// behind an active message the peer never took, and to hold up the force
// close itself.
func waitGetsBeforeForce(ctx context.Context, s *endpointState) {
	ctx, cancel := context.WithTimeout(ctx, forceCloseGrace)
	defer cancel()
	for s.ops.getsPending() && s.w.waitFor(ctx, waitReady{gets: s.ops}) == nil {
	}
}

// Listener accepts client-server connections on a socket address.
type Listener struct {
	res  *handle.Resource[listenerState]
	w    *Worker
	c    cgo.Listener
	addr netip.AddrPort
}

// enter is l.res.Enter for a Listener that may be nil: a nil Listener, like
// a zero one, is a closed one.
func (l *Listener) enter() bool { return l != nil && l.res.Enter() }

// parseAddrPort reads "host:port" with an IP address for host. To listen,
// an empty host means every IPv4 address (as net.Listen's ":port") and port
// 0 a free port; to connect, port 0 is refused, as the kernel would.
// Names are not resolved: Connect and Listen take no context for a lookup.
func parseAddrPort(op, addr string, listen bool) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, &ucs.Error{Op: op, Err: ucs.ErrInvalidAddr, Wrapped: err}
	}
	if host == "" && listen {
		host = "0.0.0.0"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, errs.New(op, ucs.ErrInvalidAddr, "host %q is not an IP address (resolve names with net.DefaultResolver.LookupNetIP)", host)
	}
	if ip.Zone() != "" {
		return netip.AddrPort{}, errs.New(op, ucs.ErrInvalidAddr, "IPv6 zone %q: UCX's socket addresses carry no zone", ip.Zone())
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, errs.New(op, ucs.ErrInvalidAddr, "port %q is not a number from 0 to 65535", port)
	}
	if n == 0 && !listen {
		return netip.AddrPort{}, errs.New(op, ucs.ErrInvalidAddr, "port 0: a listener's port is never 0")
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(n)), nil
}

// Listen listens on addr ("host:port", host an IP address; an empty host
// listens on every IPv4 address, port 0 picks a free one). UCX reads
// what a client sends in its own thread, unchecked, and 17 bytes from any
// TCP client can abort the process (docs/behaviour.md, "Known UCX issues met"): listen
// only where the hosts that reach the port are trusted.
func (w *Worker) Listen(addr string) (*Listener, error) {
	op := fmt.Sprintf("ucp: listen on %s", addr)
	ap, err := parseAddrPort(op, addr, true)
	if err != nil {
		return nil, err
	}
	if err := w.checkListenerWireup(op); err != nil {
		return nil, err
	}
	if !w.enter() {
		return nil, closedError(op)
	}
	defer w.res.Exit()
	c, bound, st := w.listen(ap, rejectAbortsLaterConnections())
	if ucs.Status(st) == ucs.ErrBusy {
		return nil, errs.New(op, ucs.ErrBusy, "the address is in use")
	}
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	l := &Listener{w: w, c: c, addr: bound}
	l.res = handle.New(w.res, releaseListener, listenerState{w, c})
	handle.Track(l, l.res)
	return l, nil
}

// rejectAbortsLaterConnections: UCX 1.16 and 1.17 replay a write event of
// a rejected connection to the next connection that reuses its socket and
// abort the listener's process (assertion in
// uct_tcp_sockcm_ep_progress_send: 11 of 15 runs of 7 connections, 4
// rejected, in one process on 1.16.0; 1 of 20 with the client in another
// process). Their listeners refuse by accepting and force-closing (0 of 20).
var rejectAbortsLaterConnections = sync.OnceValue(func() bool { return ucs.LoadedVersion().Minor < 18 })

type listenerState struct {
	w *Worker
	c cgo.Listener
}

// releaseListener rejects what comes to a closed listener from now on; its
// worker destroys it. UCX hands a connection accepted before the destroy
// to the freed listener: closing a listener while clients connected
// crashed (SIGSEGV in ucp_cm_server_conn_request_cb) in 9 of 20 runs on
// 1.18.1, and on 1.16.0, 1.22.0 and 1.23.0~rc1.
func releaseListener(s *listenerState) {
	s.w.closeListener(s.c)
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() netip.AddrPort {
	if l == nil {
		return netip.AddrPort{}
	}
	return l.addr
}

// ConnRequest is a pending connection; Accept or Reject it.
type ConnRequest struct {
	res  *handle.Resource[connState]
	l    *Listener
	c    cgo.Conn
	from netip.AddrPort
	// answered is set by the one Accept or Reject that answers the request:
	// UCX crashed on a second answer (SIGSEGV in ucp_ep_create).
	answered atomic.Bool
}

// Accept waits for the next connection (bounded by ctx) and accepts it:
// the common case. A client's request arrives only while the client's
// worker is progressed (see Worker.Connect). AcceptRequest is for a server that looks at the client
// first and may reject it. Both progress the listener's worker meanwhile,
// and the Close of the listener or of its worker ends their wait with an
// error wrapping ucs.ErrClosed.
//
// A request whose client went away before it was accepted (UCX answers
// ucs.ErrConnectionReset) is skipped, as net.Listener skips a connection
// aborted in its queue: an accept loop that stops on the first error keeps
// serving.
func (l *Listener) Accept(ctx context.Context, opts ...EndpointOption) (*Endpoint, error) {
	for {
		cr, err := l.AcceptRequest(ctx)
		if err != nil {
			return nil, err
		}
		ep, err := cr.Accept(opts...)
		if !errors.Is(err, ucs.ErrConnectionReset) {
			return ep, err
		}
	}
}

// AcceptRequest waits for the next connection request (bounded by ctx), to
// Accept or Reject.
func (l *Listener) AcceptRequest(ctx context.Context) (*ConnRequest, error) {
	op := "ucp: accept on listener"
	if a := l.Addr(); a.IsValid() { // not a zero Listener's
		op += " " + a.String()
	}
	for {
		if !l.enter() {
			return nil, closedError(op)
		}
		c, ok := l.w.takeConn(l.c)
		if ok {
			cr := &ConnRequest{l: l, c: c, from: c.ClientAddr()}
			cr.res = handle.New(l.res, releaseConn, connState{w: l.w, l: l.c, c: c})
			handle.Track(cr, cr.res)
			l.res.Exit()
			return cr, nil
		}
		// The wait holds a reference on the listener (and so its worker),
		// not the listener entered: a handler it runs may close the
		// listener, and a Close waits for what is entered. The worker's
		// Close ends the wait too: nothing progresses a closed worker for
		// its listener, so no request would come.
		l.res.Ref()
		l.res.Exit()
		err := l.w.waitFor(ctx, waitReady{op: op, listener: l, endOnClose: true})
		l.res.Release()
		if err != nil {
			var e *ucs.Error
			if errors.As(err, &e) && e.Err == ucs.ErrTimedOut {
				e.Reason = "no connection request came (a client's request arrives only while the client's worker is progressed)"
			}
			return nil, err
		}
		if l.w.res.Closing() {
			return nil, errs.New(op, ucs.ErrClosed, "the listener's worker was closed")
		}
	}
}

// connState is a pending request, rejected on release unless UCX took it.
type connState struct {
	w     *Worker
	l     cgo.Listener
	c     cgo.Conn
	taken bool
}

func releaseConn(s *connState) {
	if s.taken {
		return
	}
	s.w.rejectConn(s.l, s.c)
}

// Close stops accepting: the requests pending and any that come later are
// rejected (as by ConnRequest.Reject, whose doc says what the client sees),
// but not one AcceptRequest already returned, which its caller answers
// (dropped unanswered, it is rejected once garbage collected). The port
// stays bound until the worker is released, since UCX can still deliver a
// connection it took before the close to the listener (and crashed when
// that was destroyed).
func (l *Listener) Close() error {
	if l == nil || l.res == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	// An Accept asleep on the worker ends now. The wake signals the UCX
	// worker: only while the listener, which holds it, is held here (a
	// second Close found it destroyed: SIGSEGV).
	if !l.enter() {
		return nil
	}
	l.res.Ref()
	l.res.Exit()
	l.res.CloseWaking(l.w.signal)
	l.res.Release()
	return nil
}

// ClientAddr is where the connection request came from.
func (cr *ConnRequest) ClientAddr() netip.AddrPort {
	if cr == nil {
		return netip.AddrPort{}
	}
	return cr.from
}

// errAnswered is what a second Accept or Reject of a request returns.
func errAnswered(op string) error {
	return errs.New(op, ucs.ErrClosed, "the connection request was already accepted or rejected")
}

// Accept creates the server side endpoint of the connection. A request is
// answered once: a later Accept or Reject returns an error wrapping
// ucs.ErrClosed.
func (cr *ConnRequest) Accept(opts ...EndpointOption) (*Endpoint, error) {
	const op = "ucp: accept connection"
	if cr == nil || cr.l == nil {
		return nil, closedError(op) // a zero ConnRequest
	}
	if !cr.answered.CompareAndSwap(false, true) {
		return nil, errAnswered(op)
	}
	o := endpointOpts(opts)
	hint := fmt.Sprintf("the handshake with client %s has not finished: its worker is not being progressed", cr.from)
	ep, consumed, err := cr.l.w.newEndpoint(op, hint, endpointCreate{conn: &cr.c, peerErr: o.peerErr})
	if consumed {
		cr.disarm()
	} else {
		cr.answered.Store(false) // refused before UCX saw it: still pending
	}
	return ep, err
}

// Reject refuses the connection: the client's endpoint fails with an error
// wrapping ucs.ErrRejected, except on UCX 1.16 and 1.17, where Reject
// accepts and force-closes the connection (their reject aborted the
// listener's process on a later connection) and the client's endpoint
// fails with ucs.ErrNotConnected or ucs.ErrConnectionReset instead. See
// Accept for a request already answered.
func (cr *ConnRequest) Reject() error {
	const op = "ucp: reject connection"
	if cr == nil || cr.l == nil {
		return closedError(op) // a zero ConnRequest
	}
	if !cr.answered.CompareAndSwap(false, true) {
		return errAnswered(op)
	}
	cr.res.Close() // the release rejects
	if rejectAbortsLaterConnections() && cr.l.w.enter() {
		// The force close that refuses it reaches the client on progress
		// (as after Endpoint.Close); a server that is not running its
		// worker would leave the client waiting.
		cr.l.w.progress()
		cr.l.w.res.Exit()
	}
	return nil
}

// disarm closes the handle without rejecting: UCX took the request.
func (cr *ConnRequest) disarm() {
	cr.res.CloseWith(func(s *connState) { s.taken = true })
}

// checkListenerWireup refuses, on UCX 1.17, a connection through a
// listener from or to a worker whose context lacks FeatureAM: 1.17.0
// aborted the process in the connection's wire-up (ucp_worker.c:728,
// "wiface->activate_count > 0" in ucp_wireup_eps_progress), 3 of 3 runs
// of a put over UCX's default transports; 1.16.0, 1.18.0 and 1.19.1 did
// not (measured 2026-12-07).
func (w *Worker) checkListenerWireup(op string) error {
	if w == nil || w.engine == nil || w.ctx == nil {
		return nil // a zero Worker: its own check fails the call
	}
	if ucs.LoadedVersion().Minor == 17 && w.ctx.features&FeatureAM == 0 {
		return errs.New(op, ucs.ErrUnsupported, "UCX 1.17 aborts the process in the wire-up of a connection through a listener when the context lacks FeatureAM: add FeatureAM (WithFeatures)")
	}
	return nil
}
