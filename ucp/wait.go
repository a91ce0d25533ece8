package ucp

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ucxgo/ucx/cgo"
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
