package ucp

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// pollTick bounds one sleep on the event fd.
const pollTick = 50 * time.Millisecond

// A wait progresses at least spinRounds times, and for the worker's spin,
// before it arms the event fd and sleeps. It spins in chunks of spinChunk
// progress calls made in C (one cgo crossing each), and looks at the
// clock, its ctx and a Close between chunks.
const (
	spinRounds  = 64
	spinChunk   = 16
	yieldChunks = 4 // a spin yields the processor every yieldChunks chunks
)

// engine is one UCX worker's machinery: the worker, the mutex that
// serializes every UCX call on it, the sleep on its event fd, the requests
// handed to it (abandoned), the rendezvous data it holds, and its drain.
// It is the worker's Resource state and references no Worker, so that a
// Worker garbage collected with requests in flight is drained and released
// from its engine alone (the worker's cleanup does it).
type engine struct {
	c  cgo.Worker
	mu sync.Mutex // serializes every UCX call on the worker
	sleeper

	abandoned  []abandonedRequest          // requests whose waiters gave up; see abandonTo
	rndv       map[unsafe.Pointer]struct{} // rendezvous data not yet received or dropped, a worker reference each
	draining   bool                        // the drainer progresses the closed worker
	listeners  []cgo.Listener              // closed listeners, destroyed with the worker (see releaseListener)
	drainUntil time.Time                   // when the drainer gives up on it
	slots      []*amoSlot                  // free atomic slots (atomic.go), under mu
}

func releaseWorker(e *engine) {
	if e.efd != nil {
		e.efd.Close()
	}
	for i := range e.listeners {
		e.listeners[i].Destroy()
	}
	e.c.Destroy()
}

type abandonedRequest struct {
	r     cgo.Request
	ops   *opsInFlight // the endpoint's set it is in, left before the release
	after func()
}

// reapAbandoned releases requests whose waiters gave up, once UCX is done
// with them. Called with mu held; the caller runs the returned requests'
// after functions and drops their worker references once it has unlocked.
func (s *engine) reapAbandoned() (reaped []abandonedRequest) {
	kept := s.abandoned[:0]
	for _, a := range s.abandoned {
		if !a.r.Done() {
			kept = append(kept, a)
			continue
		}
		if a.ops != nil {
			a.ops.remove(a.r)
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
func abandonTo(res *handle.Resource[engine], r cgo.Request, ops *opsInFlight, after func()) {
	s := &res.State
	s.mu.Lock()
	s.abandoned = append(s.abandoned, abandonedRequest{r, ops, after})
	s.mu.Unlock()
	startDrain(res)
}

// collectWorker is the cleanup of a Worker garbage collected without
// Close: requests abandoned to it still hold the UCX worker, and nobody
// progresses it any more, so it is drained as a closed worker is.
func collectWorker(r *handle.Resource[engine]) {
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
func (s *engine) claimRendezvous(desc unsafe.Pointer) bool {
	if _, ok := s.rndv[desc]; !ok {
		return false
	}
	delete(s.rndv, desc)
	return true
}

// dropRendezvous releases the rendezvous data nobody received of a closed
// or collected worker, and the worker references it held: messages left in
// an AMQueue, or kept by a handler, are not received after Close.
func dropRendezvous(r *handle.Resource[engine]) {
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
func startDrain(r *handle.Resource[engine]) {
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
	workers map[*handle.Resource[engine]]struct{}
	running bool
}{workers: map[*handle.Resource[engine]]struct{}{}}

func drainAll() {
	var batch []*handle.Resource[engine]
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
func drainOnce(r *handle.Resource[engine]) {
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

// waitReady says when a wait may end without progress, and names the
// call waiting (op), for its errors.
type waitReady struct {
	op string
	// endOnClose: the worker's Close ends the wait (Run, Wait, Accept,
	// Receive: what they wait for cannot come after it). The other waits
	// are for UCX operations, which a closed worker still completes.
	endOnClose bool
	// ctxWatched: the end of ctx already signals the worker (Run watches
	// its ctx once for all its rounds), so a sleep need not watch it.
	ctxWatched bool
	req        cgo.Request  // P set: ready once it is done
	gone       *atomic.Bool // set: ready once true (a Request detached by another copy)
	gets       *opsInFlight // ready once none of its gets is pending in UCX
	listener   *Listener    // ready once it has a connection request or its Close started
	queue      *AMQueue     // ready once it has a message or is closed
}

func (r waitReady) ready() bool {
	return (r.req.P != nil && r.req.Done()) || (r.gone != nil && r.gone.Load()) ||
		(r.gets != nil && !r.gets.getsPending()) ||
		(r.listener != nil && (r.listener.c.Pending() || r.listener.res.Closing())) ||
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
			if ctx.Err() != nil || w.res.Closing() {
				break
			}
			if i%yieldChunks == 0 {
				// Let other goroutines run: with one P a busy wait would
				// otherwise keep the goroutine that progresses its peer (a
				// Run in this process) off the CPU until preempted.
				runtime.Gosched()
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return ctxError(ready.name(), err)
	}
	if ready.endOnClose && w.res.Closing() {
		return nil // Run and Wait: the worker's Close wakes them to end
	}
	return w.sleep(ctx, ready)
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
