// Package handle is ucx-go's one ownership model, used by every handle type.
//
// A Resource owns one C object. Close marks it closed at once (later
// operations get ErrClosed) and drops the owner's reference; the C object is
// released when the last reference is gone. A child (a registration of an
// MD, an endpoint of a worker, ...) holds a reference on its parent, so a
// parent's C object outlives every child whatever order Close is called in.
// Operations hold a read lock for the duration of their C call, so Close
// waits for calls in flight and never frees memory under them.
package handle

import (
	"runtime"
	"sync"
	"sync/atomic"
)

var live, leaked atomic.Int64

// Live is the number of C objects ucx-go holds now.
func Live() int64 { return live.Load() }

// Leaked is the number of handles that were garbage collected without Close
// (their C objects were released by a cleanup).
func Leaked() int64 { return leaked.Load() }

// Resource is the owned part of a handle. It must not reference the
// user-visible handle, so that the handle can be collected.
type Resource struct {
	mu      sync.RWMutex
	closed  bool
	refs    atomic.Int32
	parent  *Resource
	release func()
}

// New returns a Resource that frees its C object with release. A non-nil
// parent is kept alive until the new resource is released.
func New(parent *Resource, release func()) *Resource {
	r := &Resource{parent: parent, release: release}
	r.refs.Store(1)
	if parent != nil {
		parent.refs.Add(1)
	}
	live.Add(1)
	return r
}

// Track registers a cleanup that releases r when owner is garbage collected
// without Close.
func Track[T any](owner *T, r *Resource) {
	runtime.AddCleanup(owner, func(r *Resource) {
		if r.markClosed() {
			leaked.Add(1)
			r.unref()
		}
	}, r)
}

// Enter starts an operation: it returns false if r is closed. On true the
// caller must call Exit when its C call returns.
func (r *Resource) Enter() bool {
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return false
	}
	return true
}

// Exit ends an operation started by Enter.
func (r *Resource) Exit() { r.mu.RUnlock() }

func (r *Resource) markClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.closed = true
	return true
}

// Close marks r closed, waiting for operations in flight, and drops the
// owner's reference. It reports whether this call was the one that closed r.
func (r *Resource) Close() bool {
	if !r.markClosed() {
		return false
	}
	r.unref()
	return true
}

// SetRelease replaces the release function (nil: nothing to free), for a
// C object that UCX took over. Call it before Close.
func (r *Resource) SetRelease(release func()) {
	r.mu.Lock()
	r.release = release
	r.mu.Unlock()
}

// Ref takes an extra reference (for work in flight, such as a pending
// request), for a caller between Enter and Exit or holding a reference.
func (r *Resource) Ref() { r.refs.Add(1) }

// Release drops a reference taken by Ref.
func (r *Resource) Release() { r.unref() }

func (r *Resource) unref() {
	if r.refs.Add(-1) != 0 {
		return
	}
	if r.release != nil {
		r.release()
	}
	live.Add(-1)
	if r.parent != nil {
		r.parent.unref()
	}
}
