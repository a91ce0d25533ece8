package ucp

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Request is a non-blocking operation: Put, Get, SendAM and the like
// return one. It is a small value that may be copied freely (appended to a
// slice, sent on a channel): every copy refers to the same operation, and
// any copy may be waited for, from any goroutine. UCX records completion
// in request memory; Wait or Test reads it, so no Go code runs inside UCX
// per operation.
//
// A Wait whose ctx ends leaves the operation in flight, and a later Wait
// resumes it. A request nobody will wait for is given to its worker with
// Detach; one dropped without Detach is detached when the garbage
// collector finds it unreachable. Either way the worker releases it (and
// what it holds: pinned buffers, the mapping and remote key it uses) once
// UCX completes it. There is no Cancel: UCX cancels only tag receives
// (ucp_request_cancel ignores every other request), and Worker.RecvTag
// cancels its own when its ctx ends. A
// detached request holds its worker, not its endpoint: closing the
// endpoint (or letting it be collected) ends what it has in flight. The
// zero Request is not an
// operation: its Wait returns an error wrapping ucs.ErrInvalidParam.
//
// An operation that completed without error leaves nothing to release, and
// every copy of its Request keeps reporting that outcome: Done true, Wait
// and Test nil, Length as it was.
type Request struct {
	p   *request
	gen uint32 // which use of p is this Request's operation
}

// request is the state every copy of a Request shares, for an operation
// that does not complete at once. A finalizer, not a cleanup, detaches it
// when dropped: it needs the request itself, and a cleanup would cost an
// allocation per operation. It is set once, when the pool makes the
// request, and stays for every use (on a request not in flight it does
// nothing): setting and clearing it per operation cost more than the rest
// of a tag receive's bookkeeping. Nothing a request references refers
// back to it, as finalizers require.
//
// A request whose operation completed without error and without a length
// is recycled (requestPool) for a later operation, so that the data path
// allocates nothing: gen counts its uses, and a Request of an earlier use
// (gen differs) is that completed operation, reported as such. Every other
// outcome (an error, a length, a detach) stays with its request for good.
type request struct {
	mu      sync.Mutex
	gen     uint32 // the use; changed under mu, only when recycled
	w       *Worker
	op      string
	fl      inflight
	live    bool // fl is in flight and the request's; false once done or detached
	waiting int  // Waits in progress; a detach while >0 is done by the last
	done    bool
	// gone: detached. Set under mu, read by Waits in progress without it:
	// a Wait asleep on another copy sees it and leaves.
	gone atomic.Bool
	err  error
	n    uint64
	tag  uint64 // a tag receive's sender tag
	// landTo is the caller's buffer of a tag receive into a landing slab
	// (fl.landing): the slab's bytes are copied into it when the receive
	// completes without error, unless it was handed over (cleared then:
	// the buffer is the caller's again).
	landTo []byte
}

// inflight is what an operation in flight holds. When the request is
// detached it moves to the worker, so it references neither the request
// nor the Worker (a collected worker is drained from its state alone).
type inflight struct {
	res  *handle.Resource[engine] // holds a reference on it
	c    cgo.Request
	pin  *runtime.Pinner // Go memory pinned for the operation, if any
	uses [2]handle.Parent
	// ops is the endpoint's set of operations in flight, for a put, get
	// or active-message send kept there.
	ops   *opsInFlight
	after func()
	// slot is an atomic post's operand, back to its pool once UCX is done.
	slot *amoSlot
	// landing is a short tag receive's slab (landingSize), back to its
	// worker once UCX is done.
	landing unsafe.Pointer
}

// completedOK is every request that completed at once without error: such
// requests allocate nothing. It is never written, nor recycled.
var completedOK = &request{done: true}

// requestPool holds requests whose operation completed without error and
// whose copies may still be held: a copy tells its use by the generation.
var requestPool = sync.Pool{New: func() any {
	p := new(request)
	handle.Finalize(p, detachDropped)
	return p
}}

// recycleLocked returns p to the pool if its outcome is the one a Request
// of an earlier use reports: done, no error, no length. Called with p.mu
// held, once p is released and no Wait reads it; the caller must not use p
// after unlocking.
func (p *request) recycleLocked() {
	if p == completedOK || !p.done || p.err != nil || p.n != 0 || p.tag != 0 || p.live || p.waiting != 0 || p.gone.Load() {
		return
	}
	p.gen++
	p.w, p.op, p.done = nil, "", false
	requestPool.Put(p)
}

// newRequest wraps a started operation. An in-flight request takes a
// reference on the worker and on what it uses (the caller is inside their
// Enter); one that completed at once releases pin.
func newRequest(w *Worker, r cgo.Request, op string, pin *runtime.Pinner, uses ...handle.Parent) Request {
	if r.P == nil {
		if pin != nil {
			unpin(pin)
		}
		return completedRequest(op, ucs.Status(r.St), 0)
	}
	w.res.Ref()
	for _, u := range uses {
		if u != nil {
			u.Ref()
		}
	}
	return heldRequest(w, r, op, pin, uses...)
}

// heldRequest wraps an operation in flight whose references on the worker
// and on what it uses the caller took (an atomic takes them under the
// worker's lock: engine.atomicOp).
func heldRequest(w *Worker, r cgo.Request, op string, pin *runtime.Pinner, uses ...handle.Parent) Request {
	p := requestPool.Get().(*request)
	p.w, p.op, p.fl, p.live = w, op, inflight{res: w.res, c: r, pin: pin}, true
	for i, u := range uses {
		if u != nil {
			p.fl.uses[i] = u
		}
	}
	return Request{p, p.gen}
}

// completedRequest is a request that completed at once.
func completedRequest(op string, st ucs.Status, n uint64) Request {
	if st == ucs.OK && n == 0 {
		return Request{p: completedOK}
	}
	return Request{p: &request{op: op, done: true, n: n, err: outcomeError(op, st)}}
}

// releaseHolds unpins and drops the references of a finished operation,
// except the worker's.
func (fl *inflight) releaseHolds() {
	if fl.pin != nil {
		unpin(fl.pin)
	}
	for _, u := range fl.uses {
		if u != nil {
			u.Release()
		}
	}
	if fl.after != nil {
		fl.after()
	}
	if fl.slot != nil {
		fl.res.State.putSlot(fl.slot)
		fl.slot = nil
	}
	if fl.landing != nil {
		fl.res.State.putLanding(fl.landing)
		fl.landing = nil
	}
}

// detachDropped is every pooled request's finalizer: it hands over one
// dropped while in flight, and does nothing for the others.
func detachDropped(p *request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live {
		p.handOverLocked()
	}
}

func neverStarted(op string) error {
	if op == "" {
		op = "ucp: request"
	}
	return &ucs.Error{Op: op, Err: ucs.ErrInvalidParam, Reason: "the zero Request is not an operation"}
}

// finishLocked records the outcome of a completed operation and releases
// it. Called with p.mu held, p.live and done in UCX.
func (p *request) finishLocked() {
	fl := &p.fl
	p.live = false
	if !p.done { // settled once: a Wait or Test settles it while another Wait reads it
		p.settleLocked() // before the release: the outcome lives in the UCX request
	}
	if fl.ops != nil {
		fl.ops.remove(fl.c)
	}
	if fl.landing != nil && p.landTo != nil && p.err == nil {
		copy(p.landTo, unsafe.Slice((*byte)(fl.landing), min(int(p.n), len(p.landTo))))
	}
	p.landTo = nil
	fl.res.State.release(fl.c, fl.landing) // the slab too, in the same critical section
	fl.landing = nil
	fl.releaseHolds()
	fl.res.Release()
	p.fl = inflight{}
}

// Test reports whether the request is done, progressing the worker once if
// it is not; err is its outcome once done.
func (r Request) Test() (done bool, err error) {
	p := r.p
	if p == nil {
		return false, neverStarted("")
	}
	p.mu.Lock()
	dispatch, done, err := p.testLocked(r.gen)
	p.mu.Unlock()
	if dispatch != nil {
		// The messages the progress brought go to their handlers without
		// p's lock: a handler may use this very request.
		dispatch.dispatchPending()
	}
	return done, err
}

// testLocked is Test with p.mu held; dispatch is the worker whose handlers
// the caller is to run once it has unlocked (its progress made it the
// dispatcher).
func (p *request) testLocked(gen uint32) (dispatch *Worker, done bool, err error) {
	if p.gen != gen { // an earlier use, which completed without error
		return nil, true, nil
	}
	if p.done {
		return nil, true, p.err
	}
	if p.gone.Load() {
		return nil, false, detachedError(p.op)
	}
	if !p.fl.c.Done() {
		if _, dispatcher := p.w.progressRound(cgo.Request{}, 1); dispatcher {
			dispatch = p.w
		}
		if !p.fl.c.Done() {
			return dispatch, false, nil
		}
	}
	if p.waiting > 0 { // a Wait reads the request and will release it
		p.settleLocked()
		return dispatch, true, p.err
	}
	p.finishLocked()
	err = p.err
	p.recycleLocked()
	return dispatch, true, err
}

// settleLocked records the outcome of an operation UCX completed, which a
// Wait still reads: the last Wait releases it (finishLocked).
func (p *request) settleLocked() {
	st, n := p.fl.c.Result()
	p.done, p.n, p.tag = true, n, p.fl.c.Tag()
	p.err = outcomeError(p.op, ucs.Status(st))
}

// outcomeError is the error of an operation UCX completed with st.
func outcomeError(op string, st ucs.Status) error {
	if st == ucs.OK {
		return nil
	}
	e := &ucs.Error{Op: op, Err: st}
	if st == ucs.ErrCanceled {
		// UCX cancels what an endpoint has in flight when it is closed
		// with force (ucp_ep.c), or closed after it failed, and a flush
		// whose peer closed its end (the transport's flush is canceled).
		e.Reason = "its endpoint was force-closed, or its peer closed or failed, before it completed"
	}
	return e
}

func detachedError(op string) error {
	return &ucs.Error{Op: op, Err: ucs.ErrCanceled, Reason: "the request was detached; its worker releases it"}
}

// Wait blocks until the request completes or ctx is done, and returns the
// operation's outcome. When ctx ends first, Wait returns an error wrapping
// ucs.ErrTimedOut or ucs.ErrCanceled (and ctx.Err()) and the operation
// stays in flight: a later Wait resumes it, or Detach gives it up. A
// Detach of any copy meanwhile ends the Wait promptly with an error wrapping
// ucs.ErrCanceled.
func (r Request) Wait(ctx context.Context) error { return r.wait(ctx, nil) }

// recvOutcome is what a receive took: its length and sender tag.
type recvOutcome struct{ n, tag uint64 }

// wait is Wait; with take (a request that never left the package, so no
// copy reads it later) it also reads the receive's outcome, and lets the
// request be recycled all the same.
func (r Request) wait(ctx context.Context, take *recvOutcome) error {
	p := r.p
	if p == nil {
		return neverStarted("")
	}
	p.mu.Lock()
	if p.gen != r.gen { // an earlier use, which completed without error
		p.mu.Unlock()
		return nil
	}
	if p.done {
		err := p.err // read under the lock, like every field of p
		if take != nil {
			take.n, take.tag = p.n, p.tag
		}
		p.mu.Unlock()
		return err
	}
	if p.gone.Load() {
		p.mu.Unlock()
		return detachedError(p.op)
	}
	// While a Wait runs, the operation stays with the request (a Detach
	// meanwhile is completed by the last Wait): the Wait reads its memory.
	// A Detach from another copy ends it (gone, and a signal to the worker
	// for a Wait asleep).
	c := p.fl.c
	p.waiting++
	p.mu.Unlock()
	var err error
	for !c.Done() && !p.gone.Load() {
		if err = p.w.waitFor(ctx, waitReady{op: p.op, req: c, gone: &p.gone}); err != nil {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting--
	switch {
	case p.done:
		if p.waiting == 0 && p.live {
			p.finishLocked() // the outcome was set by a Wait that left first
		}
	case p.gone.Load():
		if p.waiting == 0 {
			p.handOverLocked()
		}
		return detachedError(p.op)
	case c.Done():
		if p.waiting == 0 {
			p.finishLocked()
		} else {
			// Another Wait still reads the request: it releases it, but
			// the outcome is every copy's from now on.
			p.settleLocked()
		}
	default:
		return &ucs.Error{Op: p.op, Err: err.(*ucs.Error).Err, Reason: "gave up waiting; the operation is still in flight", Wrapped: ctx.Err()}
	}
	err = p.err
	if take != nil {
		take.n, take.tag = p.n, p.tag
		p.n, p.tag = 0, 0 // read: nothing else will, so it may be recycled
	}
	p.recycleLocked()
	return err
}

// Detach gives the operation to its worker, which releases it when UCX
// completes it: for a request nobody will wait for (a send whose outcome
// does not matter). UCX completes it only while the worker is progressed
// (Run, a Wait, another operation's wait) or after the worker's Close,
// which drains it. Every copy then reports an error wrapping
// ucs.ErrCanceled from Wait, and Done stays false; a Wait in progress on
// another copy, from any goroutine, returns that error promptly, whatever
// its ctx. Detaching a done request does nothing.
func (r Request) Detach() {
	p := r.p
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen != r.gen || p.done || p.gone.Load() {
		return
	}
	p.gone.Store(true)
	if p.waiting == 0 {
		p.handOverLocked()
		return
	}
	// Waits still read the operation, and the last to leave hands it over.
	// Wake those asleep: the signal ends the worker's sleep on its event fd
	// (or makes the next arm report it), and whoever sleeps on the fd wakes
	// the others; each then sees gone. The worker is alive: the operation,
	// still the request's, holds a reference on it.
	p.fl.res.State.c.Signal()
}

// handOverLocked gives the operation to its worker, which releases it, and
// the reference it holds, once UCX completes it.
func (p *request) handOverLocked() {
	fl := p.fl
	p.fl, p.live, p.landTo = inflight{}, false, nil
	abandonTo(fl.res, fl.c, fl.ops, fl.releaseHolds)
}

// Done reports whether Wait or Test has seen the request complete.
func (r Request) Done() bool {
	if r.p == nil {
		return false
	}
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	return r.p.gen != r.gen || r.p.done
}

// cancel asks UCX to end the operation if it is still in flight (a tag
// receive not yet matched ends at once with ucs.ErrCanceled); it does not
// wait.
func (r Request) cancel() {
	p := r.p
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen != r.gen || p.done || !p.live || p.fl.c.Done() {
		return
	}
	p.fl.res.State.cancel(p.fl.c)
}

// Length is the number of bytes an active-message receive (ReceiveInto)
// took; it is 0 for puts, gets and sends, whose length is the caller's.
func (r Request) Length() int {
	if r.p == nil {
		return 0
	}
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if r.p.gen != r.gen {
		return 0 // a recycled request had no length
	}
	return int(r.p.n)
}

// await waits for an operation the binding started for itself (a flush, an
// endpoint close) that holds a reference on w, and runs after once UCX is
// done with it. If ctx ends first it hands the operation to the worker.
// It allocates nothing.
func (w *Worker) await(ctx context.Context, op string, r cgo.Request, after func()) error {
	if r.P == nil {
		w.res.Release()
		if after != nil {
			after()
		}
		return outcomeError(op, ucs.Status(r.St))
	}
	for !r.Done() {
		if err := w.waitFor(ctx, waitReady{op: op, req: r}); err != nil {
			if r.Done() {
				break
			}
			abandonTo(w.res, r, nil, after)
			return &ucs.Error{Op: op, Err: err.(*ucs.Error).Err, Reason: "gave up waiting", Wrapped: ctx.Err()}
		}
	}
	st, _ := r.Result()
	w.release(r, nil)
	w.res.Release()
	if after != nil {
		after()
	}
	return outcomeError(op, ucs.Status(st))
}

// waitRecv waits for a receive whose request never left its call (so its
// fields are read without its lock) until it completes, ctx ends, or its
// worker closes (no message comes for a closed worker, which Request.Wait
// does not know): nil once it completed, else why the wait ended.
func (r Request) waitRecv(ctx context.Context, op string) error {
	w, c := r.p.w, r.p.fl.c
	for !c.Done() {
		if err := w.waitFor(ctx, waitReady{op: op, req: c, endOnClose: true}); err != nil {
			return err
		}
		if w.res.Closing() {
			return errs.New(op, ucs.ErrClosed, "the worker was closed")
		}
	}
	return nil
}

// recvMem is what a receive into m needs: its memh and the parent the
// request holds; zero for Go memory (m nil).
func recvMem(m *Mem) (cgo.MemHandle, handle.Parent) {
	if m == nil {
		return cgo.MemHandle{}, nil
	}
	return m.res.State.h, &m.res
}

// leaveMem exits m, entered by a receive's caller, once the request holds
// it or the receive is done with it; nothing for Go memory.
func leaveMem(m *Mem) {
	if m != nil {
		m.res.Exit()
	}
}
