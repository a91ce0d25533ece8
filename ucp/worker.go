package ucp

import (
	"context"
	"errors"
	"github.com/ucxgo/ucx/internal/errs"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"
	"weak"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// ThreadMode is a UCS thread mode (ucs_thread_mode_t).
type ThreadMode int

// Thread modes a worker may be created with. The binding serializes every
// worker with a mutex anyway; Multi is for workers that C code also uses.
// UCX's single mode is not offered: goroutines move between OS threads, so
// it is never safe from Go.
const (
	ThreadSerialized ThreadMode = 1
	ThreadMulti      ThreadMode = 2
)

func (m ThreadMode) String() string {
	switch m {
	case 0:
		return "single"
	case ThreadSerialized:
		return "serialized"
	case ThreadMulti:
		return "multi"
	}
	return "ThreadMode(" + strconv.Itoa(int(m)) + ")"
}

// WorkerOption configures NewWorker.
type WorkerOption func(*workerOptions)

type workerOptions struct {
	mode ThreadMode
	spin time.Duration
}

// WithThreadMode sets the worker's UCS thread mode (default Serialized).
func WithThreadMode(m ThreadMode) WorkerOption {
	return func(o *workerOptions) { o.mode = m }
}

// WithSpin sets how long a wait on the worker (Request.Wait, Worker.Wait,
// Run, Flush) progresses before it sleeps on the event fd: default
// DefaultSpin. The sleep costs a wake-up of tens of microseconds through
// Go's netpoller; a worker that waits for a fast peer (an 8-byte get, a
// ping-pong) and can spare a core spins longer, as C programs' busy loops
// do. A done ctx still ends the spin.
func WithSpin(d time.Duration) WorkerOption {
	return func(o *workerOptions) { o.spin = max(d, 0) }
}

// DefaultSpin is a worker's spin unless WithSpin says otherwise: long
// enough for an operation on shared memory, short enough that a worker
// waiting for an idle peer sleeps at once.
const DefaultSpin = 50 * time.Microsecond

// pollTick bounds one sleep on the event fd.
const pollTick = 50 * time.Millisecond

// A wait progresses at least spinRounds times, and for the worker's spin,
// before it arms the event fd and sleeps. It spins in chunks of spinChunk
// progress calls made in C (one cgo crossing each), and looks at the
// clock, its ctx and a Close between chunks.
const (
	spinRounds = 64
	spinChunk  = 16
)

// Worker is a UCP worker: a progress engine with its endpoints, listeners
// and active-message handlers.
type Worker struct {
	res  *handle.Resource[workerState]
	ctx  *Context
	c    cgo.Worker
	spin time.Duration // WithSpin

	mu        *sync.Mutex                               // &res.State.mu: serializes every UCX call on the worker
	seen      uint64                                    // shim events handled so far
	completed uint64                                    // request completions seen so far
	eps       map[unsafe.Pointer]weak.Pointer[Endpoint] // weak: a dropped endpoint is collected
	handlers  map[AMID]*amHandler
	taken     []cgo.AMMessage // reused by progressLocked
	msgs      []amMessage     // reused by dispatch, nil while one runs

	sleeper // the sleep on the event fd between progress rounds
}

// workerState is what releasing a worker frees, and what draining it
// needs once its Worker is garbage collected: nothing in it may reference
// the Worker (see collectWorker).
type workerState struct {
	c   cgo.Worker
	efd *os.File

	mu         sync.Mutex                  // serializes every UCX call on the worker
	abandoned  []abandonedRequest          // requests whose waiters gave up; see Worker.abandon
	rndv       map[unsafe.Pointer]struct{} // rendezvous data not yet received or dropped, a worker reference each
	draining   bool                        // the drainer progresses the closed worker
	drainUntil time.Time                   // when the drainer gives up on it
}

func releaseWorker(s *workerState) {
	s.efd.Close()
	s.c.Destroy()
}

type abandonedRequest struct {
	r     cgo.Request
	gets  *getsInFlight // a get's endpoint set, left before the release
	after func()
}

// NewWorker creates a worker of the context.
func (c *Context) NewWorker(opts ...WorkerOption) (*Worker, error) {
	const op = "ucp: create worker"
	o := workerOptions{mode: ThreadSerialized, spin: DefaultSpin}
	for _, opt := range opts {
		opt(&o)
	}
	if o.mode != ThreadSerialized && o.mode != ThreadMulti {
		return nil, errs.New(op, ucs.ErrInvalidParam, "thread mode %v: a worker is ThreadSerialized or ThreadMulti", o.mode)
	}
	if !c.res.Enter() {
		return nil, closedError(op)
	}
	defer c.res.Exit()
	cw, st := c.c.CreateWorker(int(o.mode))
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	w := &Worker{ctx: c, c: cw, spin: o.spin, eps: map[unsafe.Pointer]weak.Pointer[Endpoint]{}, handlers: map[AMID]*amHandler{}}
	w.sleeper.init(cw)
	if err := w.openEventFD(); err != nil {
		cw.Destroy()
		return nil, err
	}
	w.res = handle.New(c.res, releaseWorker, workerState{c: cw, efd: w.efd, rndv: map[unsafe.Pointer]struct{}{}})
	w.mu = &w.res.State.mu
	runtime.AddCleanup(w, collectWorker, w.res)
	return w, nil
}

// Stats are counters for diagnosing a worker's waits.
type Stats struct {
	// TickWakeups counts sleeps on the event fd that ended by the 50 ms
	// guard tick rather than an event: each is a wake-up UCX did not signal.
	TickWakeups uint64
	// AMDropped counts active messages the shim could not queue (out of memory).
	AMDropped uint64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	st := Stats{TickWakeups: w.tickWakeups.Load()}
	if w.res.Enter() { // the shim's counter lives with the UCX worker
		w.mu.Lock()
		st.AMDropped = w.c.AMDropped()
		w.mu.Unlock()
		w.res.Exit()
	}
	return st
}

// Context is the worker's context.
func (w *Worker) Context() *Context { return w.ctx }

// WorkerAddress is a worker's packed address (ucp_worker_get_address),
// for a peer's Worker.ConnectWorker. It is opaque bytes: send it as is.
type WorkerAddress []byte

// PackAddress is the worker's packed address, for ConnectWorker on a peer.
func (w *Worker) PackAddress() (WorkerAddress, error) {
	const op = "ucp: worker address"
	if !w.res.Enter() {
		return nil, closedError(op)
	}
	defer w.res.Exit()
	w.mu.Lock()
	addr, st := w.c.Address()
	w.mu.Unlock()
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	return addr, nil
}

// Progress runs one round of UCX progress and dispatches what it brought
// (active messages to their handlers, endpoint errors); it returns the
// number of events UCX reported.
func (w *Worker) Progress() (int, error) {
	if !w.res.Enter() {
		return 0, closedError("ucp: progress worker")
	}
	n, msgs := w.progressLocked(cgo.Request{}, 1)
	w.res.Exit()
	if len(msgs) > 0 {
		w.dispatch(msgs)
	}
	return n, nil
}

// progress is Progress for callers already inside Enter.
func (w *Worker) progress() int { return w.spinOnce(cgo.Request{}, 1) }

// spinOnce is up to rounds progress calls in one crossing (see cgo Spin),
// then what every progress is followed by: messages dispatched,
// completions noted, abandoned requests reaped.
func (w *Worker) spinOnce(req cgo.Request, rounds uint) int {
	n, msgs := w.progressLocked(req, rounds)
	if len(msgs) > 0 {
		w.dispatch(msgs)
	}
	return n
}

func (w *Worker) progressLocked(req cgo.Request, rounds uint) (int, []amMessage) {
	w.mu.Lock()
	n := int(w.c.Spin(req, max(rounds, 1)))
	var msgs []amMessage
	if ev := w.c.Events(); ev != w.seen {
		w.seen = ev
		// Both buffers are the worker's, reused: taken is used under mu
		// only; msgs goes to dispatch, which gives it back.
		w.taken = w.c.TakeAM(w.taken[:0])
		msgs, w.msgs = w.msgs[:0], nil
		for _, m := range w.taken {
			msgs = append(msgs, amMessage{AMMessage: m})
		}
		clear(w.taken)
		for i := range msgs {
			if msgs[i].Rndv {
				// Rendezvous data lives in the worker until received or
				// dropped; the worker's Close or collection drops what is
				// left (a queue nobody reads would keep it for good).
				w.res.Ref()
				w.res.State.rndv[msgs[i].DataDesc] = struct{}{}
			}
			// Resolve the reply endpoint now, before a failure handled in
			// this same round can close it.
			if msgs[i].ReplyEP != nil {
				msgs[i].Reply = w.eps[msgs[i].ReplyEP].Value()
			}
		}
		for _, wp := range w.eps {
			if ep := wp.Value(); ep != nil {
				ep.checkFailed()
			}
		}
	}
	var reaped []abandonedRequest
	if len(w.res.State.abandoned) > 0 {
		reaped = w.res.State.reapAbandoned()
	}
	woke := n > 0
	if c := w.c.Completions(); c != w.completed {
		w.completed, woke = c, true
	}
	w.mu.Unlock()
	// Outside mu: dropping what a reaped request held can release a remote
	// key or an endpoint, whose release locks mu.
	for _, a := range reaped {
		if a.after != nil {
			a.after()
		}
		w.res.Release()
	}
	if woke && w.waiters.Load() > 0 {
		w.c.Signal() // wake goroutines sleeping on the event fd to recheck
	}
	return n, msgs
}

// reapAbandoned releases requests whose waiters gave up, once UCX is done
// with them. Called with mu held; the caller runs the returned requests'
// after functions and drops their worker references once it has unlocked.
func (s *workerState) reapAbandoned() (reaped []abandonedRequest) {
	kept := s.abandoned[:0]
	for _, a := range s.abandoned {
		if !a.r.Done() {
			kept = append(kept, a)
			continue
		}
		if a.gets != nil {
			a.gets.remove(a.r)
		}
		s.c.Release(a.r, false)
		reaped = append(reaped, a)
	}
	clear(s.abandoned[len(kept):])
	s.abandoned = kept
	return reaped
}

// abandonTo hands an in-flight request to its worker, which releases it
// when UCX completes it; the request's worker reference moves with it. It
// needs only the worker's state: a dropped request's cleanup calls it, and
// its Worker may be gone. A closed worker is drained, so that nobody needs
// to progress it.
func abandonTo(res *handle.Resource[workerState], r cgo.Request, gets *getsInFlight, after func()) {
	s := &res.State
	s.mu.Lock()
	s.abandoned = append(s.abandoned, abandonedRequest{r, gets, after})
	s.mu.Unlock()
	startDrain(res)
}

// collectWorker is the cleanup of a Worker garbage collected without
// Close: requests abandoned to it still hold the UCX worker, and nobody
// progresses it any more, so it is drained as a closed worker is.
func collectWorker(r *handle.Resource[workerState]) {
	if r.Closed() { // Close ran and drains: the Worker is unreachable, so nothing races this
		return
	}
	r.Ref() // keep the UCX worker for startDrain to look at
	r.Collect()
	dropRendezvous(r)
	startDrain(r)
	r.Release()
}

// claimRendezvous takes the rendezvous data desc for its one receive or
// drop: false if it was received, dropped, or dropped by the worker's
// close already.
func (s *workerState) claimRendezvous(desc unsafe.Pointer) bool {
	if _, ok := s.rndv[desc]; !ok {
		return false
	}
	delete(s.rndv, desc)
	return true
}

// dropRendezvous releases the rendezvous data nobody received of a closed
// or collected worker, and the worker references it held: messages left in
// an AMQueue, or kept by a handler, are not received after Close.
func dropRendezvous(r *handle.Resource[workerState]) {
	s := &r.State
	s.mu.Lock()
	n := len(s.rndv)
	for desc := range s.rndv {
		s.c.AMDataRelease(desc)
	}
	clear(s.rndv)
	s.mu.Unlock()
	for range n {
		r.Release()
	}
}

// startDrain hands a closed worker with abandoned requests to the
// process's drainer, unless it has it. The caller holds a reference (the
// UCX worker is alive); the drainer takes its own.
func startDrain(r *handle.Resource[workerState]) {
	s := &r.State
	s.mu.Lock()
	start := r.Closed() && !s.draining && len(s.abandoned) > 0
	if start {
		s.draining = true
		s.drainUntil = time.Now().Add(drainTimeout)
		r.Ref()
	}
	s.mu.Unlock()
	if !start {
		return
	}
	drainer.mu.Lock()
	drainer.workers[r] = struct{}{}
	run := !drainer.running
	drainer.running = true
	drainer.mu.Unlock()
	if run {
		go drainAll()
	}
}

// drainTimeout bounds how long a closed worker is progressed for requests
// abandoned to it.
const drainTimeout = 30 * time.Second

// drainPoll is how often the drainer progresses: it works from the workers'
// state alone (a Worker may be collected), so it has no event-fd sleep.
const drainPoll = time.Millisecond

// drainer progresses closed workers until the requests abandoned to them
// are done. After Close nobody else progresses a worker, yet UCX completes
// requests (and endpoint closes) only in progress: without it a request
// whose waiter gave up would keep the worker, its context and what the
// request uses alive for good. A request that does not complete within
// drainTimeout (its peer neither answers nor fails) stays with the worker,
// which then stays too.
//
// One goroutine drains every worker of the process, so the releases that
// follow (ucp_worker_destroy, then ucp_cleanup of the last worker's
// context) run one at a time: a collection that left ~270 workers to as
// many drain goroutines stalled a process up to 23 s, their threads
// contending on UCX's global memory-event lock (UCX 1.18.1, shm).
var drainer = struct {
	mu      sync.Mutex
	workers map[*handle.Resource[workerState]]struct{}
	running bool
}{workers: map[*handle.Resource[workerState]]struct{}{}}

func drainAll() {
	var batch []*handle.Resource[workerState]
	for {
		drainer.mu.Lock()
		if len(drainer.workers) == 0 {
			drainer.running = false
			drainer.mu.Unlock()
			return
		}
		batch = batch[:0]
		for r := range drainer.workers {
			batch = append(batch, r)
		}
		drainer.mu.Unlock()
		for _, r := range batch {
			drainOnce(r)
		}
		clear(batch)
		time.Sleep(drainPoll)
	}
}

// drainOnce progresses one worker once and releases what completed; a
// worker with nothing left (or past its deadline) leaves the drainer and
// drops the drainer's reference, which may release it.
func drainOnce(r *handle.Resource[workerState]) {
	s := &r.State
	s.mu.Lock()
	s.c.Progress()
	reaped := s.reapAbandoned()
	done := len(s.abandoned) == 0 || time.Now().After(s.drainUntil)
	if done {
		// Left with draining, under s.mu: a startDrain after this adds
		// the worker again.
		s.draining = false
		drainer.mu.Lock()
		delete(drainer.workers, r)
		drainer.mu.Unlock()
	}
	s.mu.Unlock()
	for _, a := range reaped {
		if a.after != nil {
			a.after()
		}
		r.Release()
	}
	if done {
		r.Release()
	}
}

// Wait blocks until the worker has made progress or ctx is done; the
// worker sleeps on its event fd meanwhile. The worker's Close ends it with
// an error wrapping ucs.ErrClosed.
func (w *Worker) Wait(ctx context.Context) error {
	if !w.res.Enter() {
		return closedError("ucp: wait on worker")
	}
	defer w.res.Exit()
	if err := w.waitFor(ctx, waitReady{op: "ucp: wait on worker", endOnClose: true}); err != nil {
		return err
	}
	if w.res.Closing() {
		return closedError("ucp: wait on worker")
	}
	return nil
}

// Run progresses the worker until ctx is done (it then returns nil) or the
// worker is closed (it returns an error wrapping ucs.ErrClosed), sleeping
// when idle. A side that owns memory its peers access runs it in a
// goroutine.
func (w *Worker) Run(ctx context.Context) error {
	if !w.res.Enter() {
		return closedError("ucp: run worker")
	}
	for {
		err := w.waitFor(ctx, waitReady{op: "ucp: run worker", endOnClose: true})
		w.res.Exit()
		// Between rounds Close may take the worker: Run then ends.
		if err == nil && !w.res.Enter() {
			return closedError("ucp: run worker")
		}
		if err != nil {
			var ue *ucs.Error
			if errors.As(err, &ue) && ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// waitReady says when a wait may end without progress: a request has
// completed, or a listener has a connection request; op names the call
// waiting, for its errors.
type waitReady struct {
	op         string
	endOnClose bool        // Run and Worker.Wait: end once the worker's Close starts
	req        cgo.Request // P set: ready once it is done
	listener   cgo.Listener
	accept     bool          // ready once listener has a pending request
	gets       *getsInFlight // ready once none is pending in UCX
	// closing, if set, ends a spin once its Close starts (the worker's own
	// Close always does), so that a long WithSpin cannot hold a Close up.
	closing interface{ Closing() bool }
	queue   *AMQueue // ready once it has a message or is closed
}

func (r waitReady) ready() bool {
	return (r.req.P != nil && r.req.Done()) || (r.accept && r.listener.Pending()) || (r.gets != nil && !r.gets.pending()) ||
		(r.queue != nil && r.queue.ready())
}

// waitFor progresses, and if nothing happened and ready is not true, arms
// the event fd and sleeps until it fires or ctx is done. It allocates
// nothing for a ctx without a Done channel: the guard timer, its callbacks
// and the netpoller callback are the worker's, made once.
func (w *Worker) waitFor(ctx context.Context, ready waitReady) error {
	// Spin first: a short operation finishes without a system call, and the
	// netpoller's wake-up costs tens of microseconds. After a sleep that saw
	// no event the worker is idle: one round, no spin.
	if w.idle.Load() {
		if w.progress() > 0 || ready.ready() {
			w.idle.Store(false)
			return nil
		}
	} else {
		spin := w.spin
		// Chunks of spinChunk rounds, each one crossing; the clock, ctx and
		// a Close are looked at between chunks.
		start := time.Now()
		for i := 1; i <= spinRounds/spinChunk || time.Since(start) < spin; i++ {
			if w.spinOnce(ready.req, spinChunk) > 0 || ready.ready() {
				return nil
			}
			if ctx.Err() != nil || w.res.Closing() || ready.closing != nil && ready.closing.Closing() {
				break
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return ctxError(ready.name(), err)
	}
	if ready.endOnClose && w.res.Closing() {
		return nil // Run and Wait: the worker's Close wakes them to end
	}
	return w.sleep(ctx, w.mu, ready)
}

func (r waitReady) name() string {
	if r.op == "" {
		return "ucp: wait on worker"
	}
	return r.op
}

// ctxError maps a context error to ErrTimedOut or ErrCanceled, keeping it.
func ctxError(op string, err error) error {
	st := ucs.ErrCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		st = ucs.ErrTimedOut
	}
	return &ucs.Error{Op: op, Err: st, Wrapped: err}
}

// Flush waits until every operation the worker started is complete
// remotely.
func (w *Worker) Flush(ctx context.Context) error {
	const op = "ucp: flush worker"
	if !w.res.Enter() {
		return closedError(op)
	}
	w.mu.Lock()
	r := w.c.Flush()
	w.mu.Unlock()
	w.res.Ref() // the flush's, dropped by await
	w.res.Exit()
	return w.await(ctx, op, r, nil)
}

// signal wakes a sleeping wait (ucp_worker_signal; safe from any goroutine).
func (w *Worker) signal() {
	w.mu.Lock()
	w.c.Signal()
	w.mu.Unlock()
}

// Close closes the worker; its UCX object goes when its endpoints,
// listeners and requests are done too. A Run, Wait, Listener.Accept or
// AMQueue.Receive on the worker wakes at once and returns an error wrapping
// ucs.ErrClosed; requests, flushes and closes in progress go on being
// progressed until they complete.
func (w *Worker) Close() error {
	// Hold a reference across the close, so that the UCX worker is still
	// there to drain if requests were abandoned to it.
	if !w.res.Enter() {
		return nil
	}
	w.res.Ref()
	w.res.Exit()
	// Wake a goroutine asleep in Run or Wait: it sees Closing and ends now
	// instead of at its next guard tick.
	if w.res.CloseWaking(w.signal) {
		dropRendezvous(w.res)
		startDrain(w.res)
	}
	w.res.Release()
	return nil
}
