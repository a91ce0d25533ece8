package ucp

import (
	"sync"
	"time"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
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
