package ucp

import (
	"net/netip"
	"sync"
	"time"
	"unsafe"
	"weak"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
)

// # The worker's lock, and the lock order of package ucp
//
// engine.ucx is a worker's lock. Every call into UCX on a worker (on it,
// its endpoints, its listeners and the remote keys unpacked on them) is
// made under it, and this file is the only one that takes it or makes those
// calls: the rest of the package calls the functions below, each of which
// takes the lock, makes one call (or one critical section that must be
// atomic) and returns. Some calls need no lock and are made anywhere:
// ucp_worker_signal (cgo Worker.Signal, which UCX makes thread-safe), the
// free of an endpoint record UCX is done with (Endpoint.Free), and reads of
// what the shim's callbacks record (Endpoint.Error, Endpoint.Handle,
// Listener.Pending; Request.Done, Result and Tag). The calls on a context
// (ucp_mem_map and ucp_mem_unmap, key and memory-handle packing, worker
// creation) are not the worker's and take no lock of it.
// lockorder_internal_test.go checks this on the package's source: the lock
// named outside this file, a cgo Worker, Endpoint, Listener or Rkey method
// that needs it called outside it, a function here that makes such a call
// without taking the lock (unless named …Locked, its caller holding it, or
// the worker's release), a …Locked function called from another file.
//
// The package's mutexes, outermost first. A goroutine that holds one takes
// only those listed after it, and never two of one kind (two workers'
// locks, two requests' locks) at once.
//
//  1. Worker.loopMu (region.go), the worker's loopback: held across the
//     loopback endpoint's creation (PackAddress, ConnectWorker), so it
//     takes peerAddressChecker.once and ucx.
//  2. peerAddressChecker.once (address.go; a sync.Once holds its mutex
//     while it runs): learns the worker's own address, so takes ucx.
//  3. endpointReaders.mu (rkeyreader.go), an endpoint's key readers: held
//     across the probe, so takes ucx (rkeyReader).
//  4. request.mu (request.go), one operation's: takes ucx (release, cancel,
//     abandon, beginDrain), drainer.mu (startDrain), opsInFlight.mu
//     (finishLocked), and what finishing an operation releases
//     (releaseHolds): pinners.mu, ucx (putSlot, a remote key's release),
//     retiredMaps.mu (a mapping's release). Request.Detach calls
//     ucp_worker_signal under it (lock-free).
//  5. engine.ucx, the worker's: takes opsInFlight.mu (reapAbandonedLocked),
//     drainer.mu (drainRound: the worker leaves the drainer under ucx, with
//     its draining flag) and Endpoint.failOnce (checkFailed, in
//     progressRound). Under it nothing is released (a release may take
//     ucx again: progressRound and drainRound run what they reaped once
//     they have let go of it), closed, or handed to user code.
//  6. retiredMaps.mu (mem.go), a context's quarantine of closed mappings:
//     calls ucp_mem_unmap (a context call) and takes liveImports.mu
//     (liveImport.unmapped).
//  7. liveImports.mu (imports.go), a context's live imports: held across a
//     whole Import, ucp_mem_map (a context call) included.
//  8. The leaves, which take no other lock and call no UCX: opsInFlight.mu
//     (gets.go, an endpoint's operations in flight), drainer.mu (drain.go),
//     AMQueue.mu (am.go), pinners.mu (rma.go), sleeper.pollMu (sleep.go:
//     the worker is armed after it is let go), Endpoint.failOnce
//     (endpoint.go).
//
// The sync.OnceValue(s) of the package (localMDs, rkeyLocalInfo,
// probeReaders, noExporterHere, rejectAbortsLaterConnections, ...) probe
// UCT or read the UCX release: they take none of these locks and call no
// worker, so any of them may run under any lock above.
//
// Two rules complete the order. Active-message handlers (user code) run
// with none of these mutexes held (dispatchPending, after the progress that
// took the messages let go of ucx; Request.Test dispatches after letting go
// of request.mu). And a handle's Close waits for the operations that
// entered it (internal/handle: Enter never waits, Close does): no Close
// runs under ucx or request.mu, and a wait that may run handlers holds no
// handle entered but its worker's, whose Close from a handler finishes
// after the wait (Worker.Close); AcceptRequest holds its listener by a
// reference across its wait, not entered.

// # What the worker's lock guards
//
// Besides serializing the calls, the lock guards the C lifetime of two of
// the worker's children, so that the atomics (engine.atomicOp) need not
// enter their endpoint and remote key (two lock pairs of internal/handle,
// which cost an atomic more than the crossing did):
//   - an endpoint's UCX endpoint is closed only under it, by
//     closeEndpointUCX, which zeroes the state's copy (endpointState.c) in
//     the same critical section; a non-zero endpointState.c read under the
//     lock is an open endpoint whose record is not freed (Free comes after
//     the close);
//   - a remote key's Close marks its state retired under it (retireKey)
//     before the owner's reference goes; a key not retired under the lock
//     still holds that reference, so its C key lives, and a reference
//     taken there for a request in flight (on the key, and through it on
//     the worker) cannot revive a released key. A key collected without
//     Close is unreachable, so no atomic holds it.
//
// Every other operation enters its handles as internal/handle says.

// engine is one UCX worker's machinery: the worker, the lock that
// serializes every UCX call on it, the sleep on its event fd, the requests
// handed to it (abandoned), the rendezvous data it holds, and its drain.
// It is the worker's Resource state and references no Worker, so that a
// Worker garbage collected with requests in flight is drained and released
// from its engine alone (the worker's cleanup does it).
//
// This file is the only one that takes the lock (ucx) and the only one
// that calls the methods of the worker's cgo objects (cgo.Worker,
// cgo.Endpoint, cgo.Listener, cgo.Rkey) that need it: each function below
// takes the lock, makes one call, or one critical section that must be
// atomic, and returns. The rest of the package calls these functions.
type engine struct {
	c   cgo.Worker
	ucx sync.Mutex // the worker's lock: serializes every UCX call on it (this file only)
	sleeper

	abandoned  []abandonedRequest          // requests whose waiters gave up; see abandonTo
	rndv       map[unsafe.Pointer]struct{} // rendezvous data not yet received or dropped, a worker reference each
	draining   bool                        // the drainer progresses the closed worker
	listeners  []cgo.Listener              // closed listeners, destroyed with the worker (see releaseListener)
	drainUntil time.Time                   // when the drainer gives up on it
	slots      []*amoSlot                  // free atomic slots (atomic.go), under ucx
	landing    []unsafe.Pointer            // free landing slabs (tag.go), under ucx
	chunks     []unsafe.Pointer            // the C memory of slots and slabs, freed with the worker
	amHeader   []byte                      // a sent header's copy, reused under ucx (UCX copies it on send)
}

// releaseWorker is the worker's release: its last reference is gone, so
// nothing else reaches the worker, and it takes no lock.
func releaseWorker(e *engine) {
	if e.efd != nil {
		e.efd.Close()
	}
	for i := range e.listeners {
		e.listeners[i].Destroy()
	}
	e.c.Destroy()
	// No request holds a slot or slab: each holds a reference on the
	// worker, whose last one is gone.
	for _, c := range e.chunks {
		cgo.FreeWords(c)
	}
	e.chunks = nil
}

// ---- Set-up (NewWorker, before the worker is shared) ----

func (e *engine) eventFD() (int, cgo.Status) {
	e.ucx.Lock()
	fd, st := e.c.EventFD()
	e.ucx.Unlock()
	return fd, st
}

func (e *engine) coverAMIDs() cgo.Status {
	e.ucx.Lock()
	st := e.c.CoverAMIDs()
	e.ucx.Unlock()
	return st
}

func (e *engine) queryMaxAMHeader() (int, cgo.Status) {
	e.ucx.Lock()
	n, st := e.c.MaxAMHeader()
	e.ucx.Unlock()
	return n, st
}

// ---- Progress ----

// progressRound progresses the worker (up to rounds progress calls in one
// crossing, see cgo Spin) and appends the active messages it brought to
// amPending; dispatcher is true when the caller is to run them (no other
// goroutine is dispatching). One critical section: the messages TakeAM
// returns are views of C memory that the next progress frees, so they are
// copied out (newAMMessage) and their reply endpoints resolved before the
// lock is let go; endpoint failures are delivered, abandoned requests
// reaped and completions noted in the same round.
func (w *Worker) progressRound(req cgo.Request, rounds uint) (n int, dispatcher bool) {
	e := w.engine
	e.ucx.Lock()
	n = int(e.c.Spin(req, max(rounds, 1)))
	if ev := e.c.Events(); ev != w.seen {
		w.seen = ev
		// taken is the worker's, reused under the lock.
		w.taken = e.c.TakeAM(w.taken[:0])
		for i := range w.taken {
			m := &w.taken[i]
			if m.Rndv {
				// Rendezvous data lives in the worker until received or
				// dropped; the worker's Close or collection drops what is
				// left (a queue nobody reads would keep it for good).
				w.res.Ref()
				e.rndv[m.DataDesc] = struct{}{}
			}
			msg := w.newAMMessage(m)
			// Resolve the reply endpoint now, before a failure handled in
			// this same round can close it.
			if m.ReplyEP != nil {
				msg.reply = w.eps[m.ReplyEP].Value()
			}
			w.amPending = append(w.amPending, msg)
		}
		clear(w.taken) // views of C memory the next spin frees
		// Endpoint failures only when one was recorded: a message must not
		// cost a look at every endpoint of the worker.
		if epErrs := e.c.EndpointErrors(); epErrs != w.seenErrors {
			w.seenErrors = epErrs
			for _, wp := range w.eps {
				if ep := wp.Value(); ep != nil {
					ep.checkFailed()
				}
			}
		}
	}
	var reaped []abandonedRequest
	if len(e.abandoned) > 0 {
		reaped = e.reapAbandonedLocked()
	}
	woke := n > 0
	if c := e.c.Completions(); c != w.completed {
		w.completed, woke = c, true
	}
	if len(w.amPending) > 0 && !w.dispatching {
		w.dispatching, dispatcher = true, true
	}
	e.ucx.Unlock()
	// Outside the lock: dropping what a reaped request held can release a
	// remote key or an endpoint, whose release takes the lock.
	for _, a := range reaped {
		if a.after != nil {
			a.after()
		}
		w.res.Release()
	}
	if woke && e.waiters.Load() > 0 {
		e.c.Signal() // wake goroutines sleeping on the event fd to recheck
	}
	return n, dispatcher
}

// reapAbandonedLocked releases requests whose waiters gave up, once UCX is
// done with them. The caller holds the lock; it runs the returned
// requests' after functions and drops their worker references once it has
// let go of it.
func (e *engine) reapAbandonedLocked() (reaped []abandonedRequest) {
	kept := e.abandoned[:0]
	for _, a := range e.abandoned {
		if !a.r.Done() {
			kept = append(kept, a)
			continue
		}
		if a.ops != nil {
			a.ops.remove(a.r)
		}
		e.c.Release(a.r, false)
		reaped = append(reaped, a)
	}
	clear(e.abandoned[len(kept):])
	e.abandoned = kept
	return reaped
}

// arm arms the event fd (ucp_worker_arm); ucs.ErrBusy: events are pending.
func (e *engine) arm() cgo.Status {
	e.ucx.Lock()
	st := e.c.Arm()
	e.ucx.Unlock()
	return st
}

// signal wakes a sleeping wait (ucp_worker_signal; safe from any goroutine).
func (e *engine) signal() {
	e.ucx.Lock()
	e.c.Signal()
	e.ucx.Unlock()
}

// flush starts a flush of the worker.
func (e *engine) flush() cgo.Request {
	e.ucx.Lock()
	r := e.c.Flush()
	e.ucx.Unlock()
	return r
}

// release frees a request UCX completed.
func (e *engine) release(r cgo.Request, slab unsafe.Pointer) {
	e.ucx.Lock()
	e.c.Release(r, false)
	if slab != nil {
		e.landing = append(e.landing, slab)
	}
	e.ucx.Unlock()
}

// cancel asks UCX to end a request in flight (ucp_request_cancel).
func (e *engine) cancel(r cgo.Request) {
	e.ucx.Lock()
	e.c.Cancel(r)
	e.ucx.Unlock()
}

// counters are the shim's count of active messages it could not queue and
// the requests abandoned to the worker now (Stats).
func (e *engine) counters() (amDropped, abandoned int64) {
	e.ucx.Lock()
	amDropped, abandoned = int64(e.c.AMDropped()), int64(len(e.abandoned))
	e.ucx.Unlock()
	return amDropped, abandoned
}

// address is the worker's UCX address.
func (e *engine) address() ([]byte, cgo.Status) {
	e.ucx.Lock()
	raw, st := e.c.Address()
	e.ucx.Unlock()
	return raw, st
}

// ---- Abandoned requests and the drain (drain.go) ----

type abandonedRequest struct {
	r     cgo.Request
	ops   *opsInFlight // the endpoint's set it is in, left before the release
	after func()
}

// abandon adds a to the requests the worker releases once UCX completes
// them.
func (e *engine) abandon(a abandonedRequest) {
	e.ucx.Lock()
	e.abandoned = append(e.abandoned, a)
	e.ucx.Unlock()
}

// beginDrain marks a closed worker with abandoned requests as draining and
// takes the drainer's reference: true if the caller is to hand it to the
// drainer (it was not draining already).
func beginDrain(r *handle.Resource[engine]) bool {
	e := &r.State
	e.ucx.Lock()
	start := r.Closed() && !e.draining && len(e.abandoned) > 0
	if start {
		e.draining = true
		e.drainUntil = time.Now().Add(drainTimeout)
		r.Ref()
	}
	e.ucx.Unlock()
	return start
}

// drainRound progresses a closed worker once and releases what completed;
// done when nothing is left or it is past its deadline, and then it has
// left the drainer (under the lock, with draining: a beginDrain after this
// hands it to the drainer again). The caller runs the reaped requests'
// after functions and drops their references, and the drainer's if done.
func drainRound(r *handle.Resource[engine]) (reaped []abandonedRequest, done bool) {
	e := &r.State
	e.ucx.Lock()
	e.c.Progress()
	reaped = e.reapAbandonedLocked()
	done = len(e.abandoned) == 0 || time.Now().After(e.drainUntil)
	if done {
		e.draining = false
		drainerLeave(r)
	}
	e.ucx.Unlock()
	return reaped, done
}

// ---- Rendezvous data ----

// claimRendezvousLocked takes the rendezvous data desc for its one receive
// or drop: false if it was received, dropped, or dropped by the worker's
// close already.
func (e *engine) claimRendezvousLocked(desc unsafe.Pointer) bool {
	if _, ok := e.rndv[desc]; !ok {
		return false
	}
	delete(e.rndv, desc)
	return true
}

// recvRendezvous claims the rendezvous data desc and starts its receive
// into n bytes at p (of memh, if set); false if it was claimed already.
func (e *engine) recvRendezvous(desc, p unsafe.Pointer, n uintptr, memh cgo.MemHandle) (cgo.Request, bool) {
	e.ucx.Lock()
	defer e.ucx.Unlock()
	if !e.claimRendezvousLocked(desc) {
		return cgo.Request{}, false
	}
	return e.c.AMRecvData(desc, p, n, memh), true
}

// releaseRendezvous claims the rendezvous data desc and releases it
// unreceived; false if it was claimed already.
func (e *engine) releaseRendezvous(desc unsafe.Pointer) bool {
	e.ucx.Lock()
	claimed := e.claimRendezvousLocked(desc)
	if claimed {
		e.c.AMDataRelease(desc)
	}
	e.ucx.Unlock()
	return claimed
}

// releaseAllRendezvous releases every rendezvous data not yet claimed and
// returns how many: the caller drops as many worker references.
func (e *engine) releaseAllRendezvous() int {
	e.ucx.Lock()
	n := len(e.rndv)
	for desc := range e.rndv {
		e.c.AMDataRelease(desc)
	}
	clear(e.rndv)
	e.ucx.Unlock()
	return n
}

// ---- Active-message handlers and their dispatch (am.go) ----

// routeAM routes id to fn (q's push, for a queue): conflict is the
// routing that refused it (a queue's, or any for a queue); st UCX's
// refusal of a new id.
func (w *Worker) routeAM(id AMID, fn AMHandler, q *AMQueue) (conflict *amHandler, st cgo.Status) {
	e := w.engine
	e.ucx.Lock()
	defer e.ucx.Unlock()
	if h, ok := w.handlers[id]; ok {
		if h.queue != nil || q != nil {
			return h, 0
		}
		h.fn = fn // in place: dispatch reads it under the lock
		return nil, 0
	}
	c, st := e.c.SetAMHandler(uint(id))
	if st != 0 {
		return nil, st
	}
	w.handlers[id] = &amHandler{fn: fn, c: c, queue: q}
	return nil, 0
}

// unrouteAM removes id's routing if it is q's (a handler's for nil);
// toQueue reports an id a handler's removal found routed to a queue.
func (w *Worker) unrouteAM(id AMID, q *AMQueue) (toQueue bool) {
	e := w.engine
	e.ucx.Lock()
	defer e.ucx.Unlock()
	h, ok := w.handlers[id]
	if !ok || h.queue != q {
		return ok && q == nil
	}
	e.c.ClearAMHandler(uint(id), h.c)
	delete(w.handlers, id)
	return false
}

// amHandlerFn is id's handler now, nil if none: read under the lock, since
// SetAMHandler replaces it in place.
func (w *Worker) amHandlerFn(id AMID) AMHandler {
	e := w.engine
	e.ucx.Lock()
	defer e.ucx.Unlock()
	if h := w.handlers[id]; h != nil {
		return h.fn
	}
	return nil
}

// nextPending is the dispatcher's next batch of messages, after done (the
// batch it ran, nil at first) is given back for reuse; nil when none is
// left, and then the caller is no longer the dispatcher: the look and the
// hand-over are one critical section, so that a message a progress queues
// meanwhile finds a dispatcher or makes one.
func (w *Worker) nextPending(done []*AMMessage) []*AMMessage {
	e := w.engine
	e.ucx.Lock()
	if done != nil {
		clear(done)
		if w.amSpare == nil {
			w.amSpare = done[:0]
		}
	}
	msgs := w.amPending
	if len(msgs) == 0 {
		w.dispatching = false
	} else {
		w.amPending, w.amSpare = w.amSpare, nil
	}
	e.ucx.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	return msgs
}

// requeuePending puts msgs back at the head of the queue, and the caller
// is no longer the dispatcher: a dispatch a handler's panic ended.
func (w *Worker) requeuePending(msgs []*AMMessage) {
	e := w.engine
	e.ucx.Lock()
	w.amPending = append(msgs[:len(msgs):len(msgs)], w.amPending...)
	w.dispatching = false
	e.ucx.Unlock()
}

// isDispatching reports whether a goroutine runs handlers now.
func (w *Worker) isDispatching() bool {
	e := w.engine
	e.ucx.Lock()
	defer e.ucx.Unlock()
	return w.dispatching
}

// amSend sends an active message on ep: the header goes to C from the
// engine's own buffer, copied under the lock (the caller's may lie in a
// value that holds Go pointers, which the cgo pointer rules forbid
// passing), and UCX copies it before ucp_am_send_nbx returns.
func (e *engine) amSend(ep cgo.Endpoint, id AMID, header []byte, p unsafe.Pointer, n int, memh cgo.MemHandle, flags AMSendFlags, imm bool) cgo.Request {
	e.ucx.Lock()
	e.amHeader = append(e.amHeader[:0], header...)
	r := ep.AMSend(uint(id), e.amHeader, p, uintptr(n), memh, uint(flags), imm)
	e.ucx.Unlock()
	return r
}

// ---- Endpoints, listeners, remote keys (endpoint.go, mem.go, rkeyreader.go) ----

// endpointCreate says how to create an endpoint: to a worker address
// (addr), to a listener (sockaddr), or from a connection request (conn).
type endpointCreate struct {
	addr     []byte // a peer worker's UCX address, padded (peerAddressCopy)
	sockaddr netip.AddrPort
	conn     *cgo.Conn
	peerErr  bool
}

// createEndpoint creates ep's UCX endpoint and registers ep with the
// worker, in one critical section: a progress between the two would miss
// its failure and the messages that name it for a reply.
func (w *Worker) createEndpoint(ep *Endpoint, how endpointCreate) cgo.Status {
	e := w.engine
	e.ucx.Lock()
	defer e.ucx.Unlock()
	var c cgo.Endpoint
	var st cgo.Status
	switch {
	case how.conn != nil:
		c, st = e.c.Accept(*how.conn, how.peerErr)
	case how.addr != nil:
		c, st = e.c.ConnectWorker(how.addr, how.peerErr)
	default:
		c, st = e.c.ConnectSockaddr(how.sockaddr, how.peerErr)
	}
	if st != 0 {
		return st
	}
	ep.c = c
	w.eps[c.Handle()] = weak.Make(ep)
	return 0
}

// closeEndpointUCX unregisters s's endpoint c and starts its close, with
// force if asked or if UCX reported it failed (forced then says so); s
// lets go of c under the lock (see "What the worker's lock guards").
func (w *Worker) closeEndpointUCX(s *endpointState, force bool) (c cgo.Endpoint, r cgo.Request, forced bool) {
	e := w.engine
	e.ucx.Lock()
	c = s.c
	delete(w.eps, c.Handle())
	forced = force || c.Error() != 0
	r = c.Close(forced)
	s.c = cgo.Endpoint{}
	e.ucx.Unlock()
	return c, r, forced
}

// flushEndpoint starts a flush of c.
func (e *engine) flushEndpoint(c cgo.Endpoint) cgo.Request {
	e.ucx.Lock()
	r := c.Flush()
	e.ucx.Unlock()
	return r
}

// listen creates a listener on ap.
func (e *engine) listen(ap netip.AddrPort, refuseByClosing bool) (cgo.Listener, netip.AddrPort, cgo.Status) {
	e.ucx.Lock()
	l, bound, st := e.c.Listen(ap, refuseByClosing)
	e.ucx.Unlock()
	return l, bound, st
}

// closeListener rejects what comes to l from now on, and keeps l for the
// worker's release to destroy.
func (e *engine) closeListener(l cgo.Listener) {
	e.ucx.Lock()
	l.Close()
	e.listeners = append(e.listeners, l)
	e.ucx.Unlock()
}

// takeConn pops l's next connection request.
func (e *engine) takeConn(l cgo.Listener) (cgo.Conn, bool) {
	e.ucx.Lock()
	c, ok := l.Take()
	e.ucx.Unlock()
	return c, ok
}

// rejectConn rejects the connection request c of l.
func (e *engine) rejectConn(l cgo.Listener, c cgo.Conn) {
	e.ucx.Lock()
	l.Reject(c)
	e.ucx.Unlock()
}

// unpackRkey unpacks a remote key on ep.
func (e *engine) unpackRkey(ep cgo.Endpoint, packed []byte) (cgo.Rkey, cgo.Status) {
	e.ucx.Lock()
	k, st := ep.UnpackRemoteKey(packed)
	e.ucx.Unlock()
	return k, st
}

// retireKey marks a remote key closed under the lock, before its owner's
// reference goes (see "What the worker's lock guards").
func (e *engine) retireKey(s *rkeyState) {
	e.ucx.Lock()
	s.retired = true
	e.ucx.Unlock()
}

// destroyRkey destroys k.
func (e *engine) destroyRkey(k *cgo.Rkey) {
	e.ucx.Lock()
	k.Destroy()
	e.ucx.Unlock()
}

// rkeyReader asks UCX which reader ep gives the probe key (rkeyreader.go).
func (e *engine) rkeyReader(ep cgo.Endpoint, key []byte) (marker uint64, mapped bool, st cgo.Status) {
	e.ucx.Lock()
	marker, mapped, st = ep.RkeyReader(key)
	e.ucx.Unlock()
	return marker, mapped, st
}

// ---- The data path (rma.go, atomic.go, tag.go, stream.go) ----

// rma starts a put (or a get) of n bytes at p on ep.
func (e *engine) rma(ep cgo.Endpoint, put bool, p unsafe.Pointer, n int, memh cgo.MemHandle, raddr uint64, rkey cgo.Rkey) cgo.Request {
	e.ucx.Lock()
	var r cgo.Request
	if put {
		r = ep.Put(p, uintptr(n), memh, raddr, rkey)
	} else {
		r = ep.Get(p, uintptr(n), memh, raddr, rkey)
	}
	e.ucx.Unlock()
	return r
}

// atomicOp starts an atomic on the endpoint of eps with the key of k, both
// checked under the lock instead of entered by the caller (see "What the
// worker's lock guards"): closed, one of them is closed; failed, the
// endpoint's failure. The operand v (and swap for a compare-and-swap, in
// the reply word) go in a free slot: c.P nil, it completed at once, the
// slot is free again and a fetch's old value is old; in flight, the
// references of its request on the worker and on k are taken here (see
// heldRequest), and the caller owns s until UCX is done with it (putSlot).
func (e *engine) atomicOp(eps *endpointState, k *handle.Resource[rkeyState], code uint, size int, v, swap uint64, fetch bool, raddr uint64) (c cgo.Request, old uint64, s *amoSlot, closed bool, failed cgo.Status) {
	e.ucx.Lock()
	ep := eps.c
	switch {
	case ep.IsZero() || k.State.retired:
		e.ucx.Unlock()
		return c, 0, nil, true, 0
	case ep.Error() != 0:
		failed = ep.Error()
		e.ucx.Unlock()
		return c, 0, nil, false, failed
	}
	s = e.getSlotLocked()
	setWord(s.operand(), size, v)
	var reply unsafe.Pointer
	if fetch {
		reply = s.reply()
		setWord(reply, size, swap)
	}
	c = ep.Atomic(code, uintptr(size), s.operand(), reply, raddr, k.State.c)
	if c.P == nil {
		if fetch && c.St == 0 {
			old = word(reply, size)
		}
		e.slots = append(e.slots, s) // UCX holds nothing of it
		s = nil
	} else {
		// Safe under the lock: the key is not retired, so its owner's
		// reference holds, and with it the key's on the worker.
		k.State.w.Ref()
		k.Ref()
	}
	e.ucx.Unlock()
	return c, old, s, false, 0
}

// getSlotLocked takes a free atomic slot; the caller holds the lock.
func (e *engine) getSlotLocked() *amoSlot {
	if len(e.slots) == 0 {
		words := cgo.AllocWords(2 * amoChunk)
		if words == nil {
			panic("ucp: out of C memory for atomics")
		}
		e.chunks = append(e.chunks, words)
		for i := range amoChunk {
			e.slots = append(e.slots, &amoSlot{unsafe.Add(words, 16*i)})
		}
	}
	s := e.slots[len(e.slots)-1]
	e.slots = e.slots[:len(e.slots)-1]
	return s
}

// putSlot gives s back to the free slots.
func (e *engine) putSlot(s *amoSlot) {
	e.ucx.Lock()
	e.slots = append(e.slots, s)
	e.ucx.Unlock()
}

// tagSend starts a tagged send of n bytes at p on ep; imm: see sendGo.
func (e *engine) tagSend(ep cgo.Endpoint, tag Tag, p unsafe.Pointer, n int, memh cgo.MemHandle, imm bool) cgo.Request {
	e.ucx.Lock()
	r := ep.TagSend(uint64(tag), p, uintptr(n), memh, imm)
	e.ucx.Unlock()
	return r
}

// tagRecv posts a tagged receive into n bytes at p, or with land into a
// landing slab, a piece of the worker's C memory that a receive completed
// at once copies into land; one that completed at once reports its length
// and the sender's tag. A receive in flight into a slab returns it, which
// goes back with the request's release.
func (e *engine) tagRecv(p unsafe.Pointer, n int, tag, mask Tag, memh cgo.MemHandle, land []byte) (r cgo.Request, length, sender uint64, slab unsafe.Pointer) {
	e.ucx.Lock()
	if land != nil {
		slab = e.getLandingLocked()
		p, n = slab, len(land)
	}
	r, length, sender = e.c.TagRecv(p, uintptr(n), uint64(tag), uint64(mask), memh)
	if slab != nil && r.P == nil {
		if r.St == 0 {
			copy(land, unsafe.Slice((*byte)(slab), min(int(length), n)))
		}
		e.landing = append(e.landing, slab)
		slab = nil
	}
	e.ucx.Unlock()
	return r, length, sender, slab
}

// getLandingLocked takes a free landing slab; the caller holds the lock.
func (e *engine) getLandingLocked() unsafe.Pointer {
	if len(e.landing) == 0 {
		chunk := cgo.AllocWords(landingChunk * landingSize / 8)
		if chunk == nil {
			panic("ucp: out of C memory for receives")
		}
		e.chunks = append(e.chunks, chunk)
		for i := range landingChunk {
			e.landing = append(e.landing, unsafe.Add(chunk, i*landingSize))
		}
	}
	s := e.landing[len(e.landing)-1]
	e.landing = e.landing[:len(e.landing)-1]
	return s
}

// putLanding gives a slab back to the free ones.
func (e *engine) putLanding(slab unsafe.Pointer) {
	e.ucx.Lock()
	e.landing = append(e.landing, slab)
	e.ucx.Unlock()
}

// tagProbe looks for a message matching tag under mask, taking nothing.
func (e *engine) tagProbe(tag, mask Tag) (ok bool, length, sender uint64) {
	e.ucx.Lock()
	ok, length, sender = e.c.TagProbe(uint64(tag), uint64(mask))
	e.ucx.Unlock()
	return ok, length, sender
}

// streamSend starts a send of n bytes at p on ep's stream.
func (e *engine) streamSend(ep cgo.Endpoint, p unsafe.Pointer, n int, memh cgo.MemHandle) cgo.Request {
	e.ucx.Lock()
	r := ep.StreamSend(p, uintptr(n), memh)
	e.ucx.Unlock()
	return r
}

// streamRecv posts a receive into up to n bytes at p on ep's stream; one
// that completed at once reports its length.
func (e *engine) streamRecv(ep cgo.Endpoint, p unsafe.Pointer, n int, memh cgo.MemHandle, waitAll bool) (cgo.Request, uint64) {
	e.ucx.Lock()
	r, length := ep.StreamRecv(p, uintptr(n), memh, waitAll)
	e.ucx.Unlock()
	return r, length
}
