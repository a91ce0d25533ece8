package ucp

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Request is a non-blocking operation: Put, Get, SendAM, Flush and the
// like return one. UCX records its completion in request memory; Wait or
// Test reads it, so no Go code runs inside UCX per operation. A Request
// must be waited for until done, or cancelled.
type Request struct {
	w   *Worker
	c   cgo.Request
	op  string
	pin *runtime.Pinner // Go memory pinned for the operation, if any
	// uses are the mapping and remote key an in-flight operation uses: it
	// holds a reference on each, so that closing them waits for it.
	uses [2]handle.Parent
	// gets is the endpoint's count of gets in flight, for a get.
	gets *atomic.Int32
	// after runs once UCX is done with the request (after Wait, Test, or
	// when the worker reaps it once abandoned).
	after func()
	done  bool
	err   error
	n     uint64
}

// newRequest wraps a started operation. An in-flight request takes a
// reference on the worker and on what it uses (the caller is inside their
// Enter).
func newRequest(w *Worker, r cgo.Request, op string, pin *runtime.Pinner, uses ...handle.Parent) Request {
	req := Request{w: w, c: r, op: op, pin: pin}
	if r.P == nil {
		req.finish(ucs.Status(r.St), 0)
		return req
	}
	w.res.Ref()
	for i, u := range uses {
		if u != nil {
			u.Ref()
			req.uses[i] = u
		}
	}
	return req
}

func (r *Request) finish(st ucs.Status, n uint64) {
	r.done, r.n = true, n
	if st != ucs.OK {
		r.err = &ucs.Error{Op: r.op, Err: st}
	}
	r.releaseHolds()
	if r.after != nil {
		r.after()
		r.after = nil
	}
}

// releaseHolds unpins and drops the references of a finished operation.
func (r *Request) releaseHolds() {
	if r.gets != nil {
		r.gets.Add(-1)
		r.gets = nil
	}
	if r.pin != nil {
		unpin(r.pin)
		r.pin = nil
	}
	for i, u := range r.uses {
		if u != nil {
			u.Release()
			r.uses[i] = nil
		}
	}
}

// complete releases a finished in-flight request.
func (r *Request) complete() {
	st, n := r.c.Result()
	r.w.mu.Lock()
	r.w.c.Release(r.c, false)
	r.w.mu.Unlock()
	r.w.res.Release()
	r.c.P = nil
	r.finish(ucs.Status(st), n)
}

// Test reports whether the request is done, progressing the worker once if
// it is not; err is its outcome once done.
func (r *Request) Test() (done bool, err error) {
	if r.done {
		return true, r.err
	}
	if r.c.P == nil {
		return false, &ucs.Error{Op: r.op, Err: ucs.ErrInvalidParam, Reason: "request was never started"}
	}
	if !r.c.Done() {
		r.w.progress()
		if !r.c.Done() {
			return false, nil
		}
	}
	r.complete()
	return true, r.err
}

// Wait blocks until the request completes or ctx is done. When ctx ends
// first, Wait returns an error wrapping ucs.ErrTimedOut or ucs.ErrCanceled
// (and ctx.Err()); the operation itself may still complete, and the worker
// releases it then.
func (r *Request) Wait(ctx context.Context) error {
	if r.done {
		return r.err
	}
	if r.c.P == nil {
		return &ucs.Error{Op: r.op, Err: ucs.ErrInvalidParam, Reason: "request was never started"}
	}
	for !r.c.Done() {
		if err := r.w.waitFor(ctx, waitReady{op: r.op, req: r.c}); err != nil {
			if r.c.Done() {
				break
			}
			r.abandon()
			return &ucs.Error{Op: r.op, Err: err.(*ucs.Error).Err, Reason: "gave up waiting", Wrapped: ctx.Err()}
		}
	}
	r.complete()
	return r.err
}

// Cancel asks UCX to cancel the request (UCX may complete it instead) and
// hands it to the worker, which releases it when UCX is done with it.
func (r *Request) Cancel() {
	if r.done || r.c.P == nil {
		return
	}
	r.w.mu.Lock()
	r.w.c.Cancel(r.c)
	r.w.mu.Unlock()
	r.abandon()
}

func (r *Request) abandon() {
	held := *r // the worker releases what it holds once UCX is done
	// What the worker keeps must not reference the Worker: a collected
	// worker is drained from its state alone (collectWorker).
	held.w = nil
	r.w.abandon(r.c, func() {
		held.releaseHolds()
		if held.after != nil {
			held.after()
		}
	})
	r.c.P, r.pin, r.after, r.uses, r.gets = nil, nil, nil, [2]handle.Parent{}, nil
	r.done = true
	r.err = &ucs.Error{Op: r.op, Err: ucs.ErrCanceled, Reason: "abandoned before completion"}
}

// Done reports whether Wait or Test has seen the request complete.
func (r *Request) Done() bool { return r.done }

// Length is the number of bytes received, for receive operations.
func (r *Request) Length() int { return int(r.n) }
