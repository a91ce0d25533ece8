// Package handle is ucx-go's one ownership model, used by every handle type.
//
// A Resource owns one C object, described by its state S (the C handles the
// release function frees). Close marks it closed at once (later operations
// get ErrClosed) and drops the owner's reference; the C object is released
// when the last reference is gone. A child (a registration of an MD, an
// endpoint of a worker, a request in flight on a mapping, ...) holds a
// reference on its parent, so a parent's C object outlives every child
// whatever order Close is called in. Operations hold a read lock for the
// duration of their C call, so Close waits for calls in flight and never
// frees memory under them. One exception, stated where it is made
// (ucp/engine.go, "What the worker's lock guards"): ucp's atomics check
// their endpoint and remote key under the worker's lock, under which those
// are closed, instead of entering them.
//
// A handle dropped without Close is released by the garbage collector, in
// one of two ways, chosen per type:
//   - Track (a runtime cleanup) for handles that users' callbacks may
//     reference back (endpoints, listeners; workers use their own cleanup,
//     which also drains them): cleanups are safe in reference cycles. The
//     Resource is then a separate allocation, since a cleanup's argument
//     must not point into its owner.
//   - Finalize (a finalizer) for the leaves created on hot paths (memory
//     mappings, remote keys): the Resource is embedded in the handle, which
//     makes the handle one allocation. These handles reference no user code
//     and sit in no cycle, which finalizers require.
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
// (their C objects were released by a cleanup or finalizer).
func Leaked() int64 { return leaked.Load() }

// Parent is what a child holds of its parent: a reference count.
type Parent interface {
	Ref()
	Release()
}

// Resource is the owned part of a handle, with the state S its release
// function frees. S must not reference the user-visible handle.
type Resource[S any] struct {
	mu     sync.RWMutex
	closed bool
	// closedFlag mirrors closed for Closed, which must not wait on mu.
	closedFlag atomic.Bool
	// closing is set when a Close starts, before it waits for operations in
	// flight: a long operation (a busy-polling wait) looks at it to end.
	closing atomic.Bool
	refs    atomic.Int32
	parent  Parent
	release func(*S)
	State   S
}

// New returns a Resource that frees state with release (nil: nothing to
// free). A non-nil parent is kept alive until the new resource is released.
func New[S any](parent Parent, release func(*S), state S) *Resource[S] {
	r := &Resource[S]{State: state}
	r.Init(parent, release)
	return r
}

// Init sets up a Resource embedded in its handle (see Finalize); the
// caller fills State.
func (r *Resource[S]) Init(parent Parent, release func(*S)) {
	r.parent, r.release = parent, release
	r.refs.Store(1)
	if parent != nil {
		parent.Ref()
	}
	live.Add(1)
}

// Track registers a cleanup that releases r when owner is garbage collected
// without Close. r must be a separate allocation from owner.
func Track[T, S any](owner *T, r *Resource[S]) {
	runtime.AddCleanup(owner, (*Resource[S]).Collect, r)
}

// Finalize registers collect (which calls Collect on the owner's embedded
// Resource) to run when owner is garbage collected without Close; owner
// must be in no reference cycle. Close undoes it with Unfinalize.
func Finalize[T any](owner *T, collect func(*T)) { runtime.SetFinalizer(owner, collect) }

// Unfinalize drops owner's finalizer once it is closed, so that the
// collector frees it in one cycle.
func Unfinalize[T any](owner *T) { runtime.SetFinalizer(owner, nil) }

// CloseFinalized is Close for a handle tracked by Finalize: the call that
// closes r also drops owner's finalizer.
func CloseFinalized[T, S any](owner *T, r *Resource[S]) {
	if r.Close() {
		Unfinalize(owner)
	}
}

// Collect releases a resource whose handle was garbage collected, counting
// it as leaked if it was still open.
func (r *Resource[S]) Collect() {
	if r.markClosed(nil) {
		leaked.Add(1)
		r.unref()
	}
}

// Enter starts an operation: it returns false once a Close has started. On
// true the caller must call Exit when its C call returns. It never waits:
// only a Close locks mu, and a reader queued behind it would deadlock a
// Close waiting for an operation that enters again (an active-message
// handler that Run, in flight on the worker, calls). A nil or never
// initialised Resource (a zero handle's) is closed.
func (r *Resource[S]) Enter() bool {
	if r == nil || r.refs.Load() == 0 || r.closing.Load() || !r.mu.TryRLock() {
		return false
	}
	if r.closed {
		r.mu.RUnlock()
		return false
	}
	return true
}

// Closed reports whether r was closed (its C object may still live on
// through references). It takes no lock, so callers holding their own
// locks cannot deadlock against a Close waiting for operations.
func (r *Resource[S]) Closed() bool { return r == nil || r.closedFlag.Load() }

// Exit ends an operation started by Enter.
func (r *Resource[S]) Exit() { r.mu.RUnlock() }

// Closing reports whether a Close has started (it may be waiting for
// operations in flight, which should then end soon).
func (r *Resource[S]) Closing() bool { return r == nil || r.closing.Load() }

func (r *Resource[S]) markClosed(set func(*S)) bool {
	if r == nil || r.refs.Load() == 0 {
		return false // a zero handle's, or released: nothing to close
	}
	r.closing.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.closed = true
	r.closedFlag.Store(true)
	if set != nil {
		set(&r.State)
	}
	return true
}

// Close marks r closed, waiting for operations in flight, and drops the
// owner's reference. It reports whether this call was the one that closed r.
func (r *Resource[S]) Close() bool { return r.CloseWith(nil) }

// MarkClosing starts a close that a later CloseWaking finishes: from now
// on Enter fails, and wake ends waits in flight.
func (r *Resource[S]) MarkClosing(wake func()) {
	r.closing.Store(true)
	wake()
}

// CloseWaking is Close that calls wake once Closing reports true and
// before waiting for the operations in flight, so that an operation asleep
// (a worker's wait) can be woken to see Closing and end at once.

func (r *Resource[S]) CloseWaking(wake func()) bool {
	r.closing.Store(true)
	wake()
	return r.CloseWith(nil)
}

// CloseWith is Close that, when this call is the one that closes r, first
// applies set to the state (how to release it, say) under r's lock.
func (r *Resource[S]) CloseWith(set func(*S)) bool {
	if !r.markClosed(set) {
		return false
	}
	r.unref()
	return true
}

// Ref takes an extra reference (for work in flight, such as a pending
// request), for a caller between Enter and Exit or holding a reference.
func (r *Resource[S]) Ref() { r.refs.Add(1) }

// Release drops a reference taken by Ref.
func (r *Resource[S]) Release() { r.unref() }

func (r *Resource[S]) unref() {
	if r.refs.Add(-1) != 0 {
		return
	}
	if r.release != nil {
		r.release(&r.State)
	}
	live.Add(-1)
	if r.parent != nil {
		r.parent.Release()
	}
}
