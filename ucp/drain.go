package ucp

import (
	"sync"
	"time"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
)

// abandonTo hands an in-flight request to its worker, which releases it
// when UCX completes it; the request's worker reference moves with it. It
// needs only the worker's state: a dropped request's cleanup calls it, and
// its Worker may be gone. A closed worker is drained, so that nobody needs
// to progress it.
func abandonTo(res *handle.Resource[engine], r cgo.Request, ops *opsInFlight, after func()) {
	res.State.abandon(abandonedRequest{r, ops, after})
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

// dropRendezvous releases the rendezvous data nobody received of a closed
// or collected worker, and the worker references it held: messages left in
// an AMQueue, or kept by a handler, are not received after Close.
func dropRendezvous(r *handle.Resource[engine]) {
	n := r.State.releaseAllRendezvous()
	for range n {
		r.Release()
	}
}

// startDrain hands a closed worker with abandoned requests to the
// process's drainer, unless it has it. The caller holds a reference (the
// UCX worker is alive); the drainer takes its own.
func startDrain(r *handle.Resource[engine]) {
	if !beginDrain(r) {
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
	reaped, done := drainRound(r)
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

// drainerLeave takes r out of the drainer's workers. drainRound calls it
// with the worker's lock held.
func drainerLeave(r *handle.Resource[engine]) {
	drainer.mu.Lock()
	delete(drainer.workers, r)
	drainer.mu.Unlock()
}
