package ucp

import (
	"sync"

	"github.com/ucxgo/ucx/cgo"
)

// getsInFlight are an endpoint's gets whose UCX requests are not yet
// released, for a force close to wait for (see CloseForce). A get leaves
// the set before its UCX request is released, so that every request in it
// may be read; one that UCX completed (waited for or not) does not hold a
// force close up.
type getsInFlight struct {
	mu   sync.Mutex
	reqs []cgo.Request
}

func (g *getsInFlight) add(r cgo.Request) {
	g.mu.Lock()
	g.reqs = append(g.reqs, r)
	g.mu.Unlock()
}

func (g *getsInFlight) remove(r cgo.Request) {
	g.mu.Lock()
	for i, q := range g.reqs {
		if q.P == r.P {
			last := len(g.reqs) - 1
			g.reqs[i] = g.reqs[last]
			g.reqs[last] = cgo.Request{}
			g.reqs = g.reqs[:last]
			break
		}
	}
	g.mu.Unlock()
}

// pending reports whether a get in the set is not complete in UCX.
func (g *getsInFlight) pending() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.reqs {
		if !r.Done() {
			return true
		}
	}
	return false
}
