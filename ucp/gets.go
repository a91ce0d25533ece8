package ucp

import (
	"sync"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/ucs"
)

// opsInFlight are an endpoint's puts, gets and active-message sends whose
// UCX requests are not yet released. A force close waits for the gets among
// them (see CloseForce); a flush close that met the peer's close or failure
// asks whether one was lost (see CloseFlush). Atomics are not kept: UCX
// performs them only on endpoints without peer error handling, which never
// learn of a peer's close. An operation leaves the set before its UCX
// request is released, so that every request in it may be read; one that
// UCX completed (waited for or not) holds no force close up.
type opsInFlight struct {
	mu  sync.Mutex
	ops []opInFlight
	// failed counts the operations that left the set with an error.
	failed uint64
}

type opInFlight struct {
	r   cgo.Request
	get bool
}

func (o *opsInFlight) add(r cgo.Request, get bool) {
	o.mu.Lock()
	o.ops = append(o.ops, opInFlight{r, get})
	o.mu.Unlock()
}

// remove takes r, which UCX completed, out of the set, counting it if it
// failed.
func (o *opsInFlight) remove(r cgo.Request) {
	o.mu.Lock()
	for i, q := range o.ops {
		if q.r.P == r.P {
			if st, _ := r.Result(); ucs.Status(st) != ucs.OK {
				o.failed++
			}
			last := len(o.ops) - 1
			o.ops[i] = o.ops[last]
			o.ops[last] = opInFlight{}
			o.ops = o.ops[:last]
			break
		}
	}
	o.mu.Unlock()
}

// getsPending reports whether a get in the set is not complete in UCX.
func (o *opsInFlight) getsPending() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, q := range o.ops {
		if q.get && !q.r.Done() {
			return true
		}
	}
	return false
}

// failures is the number of operations that left the set with an error,
// for lost to count those that leave it from now on.
func (o *opsInFlight) failures() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}

// lost counts the operations that did not complete without error: those in
// the set that UCX has not completed or completed with an error, and those
// that left it with an error since failures returned since.
func (o *opsInFlight) lost(since uint64) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := int(o.failed - since)
	for _, q := range o.ops {
		if !q.r.Done() {
			n++
		} else if st, _ := q.r.Result(); ucs.Status(st) != ucs.OK {
			n++
		}
	}
	return n
}
