package ucp

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucs"
)

// sleeper is the engine's state for how a worker's waits sleep between
// progress rounds: on a duplicate of the worker's event fd in Go's
// netpoller, one goroutine at a time (the poller), the others on a channel
// the poller closes when it wakes, each sleep bounded by a guard tick and
// ended by its ctx.
type sleeper struct {
	efd     *os.File // a duplicate of ucp_worker_get_efd, in Go's netpoller
	rc      syscall.RawConn
	waiters atomic.Int32 // goroutines in sleep: progress signals the fd for them

	// One goroutine at a time sleeps on the event fd (the poller); other
	// waiters sleep on wake, which the poller closes when it wakes.
	pollMu    sync.Mutex
	polling   bool
	wake      chan struct{}
	wakeTaken bool // a waiter other than the poller waits on wake

	// The poller's sleep, bounded by the guard timer below.
	guard      *time.Timer
	guardFired atomic.Bool
	signals    sync.WaitGroup // guard and ctx signals started, not yet done
	ctxSignal  func()
	pollDone   func(uintptr) bool
	pollFirst  bool

	tickWakeups atomic.Uint64 // sleeps that ended by pollTick, not the fd
	idle        atomic.Bool   // the last sleep ended by pollTick
}

// openEventFD puts a duplicate of the worker's event fd in Go's netpoller,
// so a sleeping worker costs no thread and no CPU.
func (e *engine) openEventFD() error {
	const op = "ucp: worker event fd"
	fd, st := e.eventFD()
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return err
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Wrapped: err}
	}
	syscall.CloseOnExec(dup)
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Wrapped: err}
	}
	e.efd = os.NewFile(uintptr(dup), "ucp-worker-efd")
	if e.rc, err = e.efd.SyscallConn(); err != nil {
		e.efd.Close()
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Wrapped: err}
	}
	return nil
}

// sleep arms the worker and sleeps until its event fd fires, the guard
// ticks, or ctx is done, unless ready turns true first. It allocates
// nothing for a ctx without a Done channel, nor for one whose end already
// signals the worker (ready.ctxWatched).
func (e *engine) sleep(ctx context.Context, ready waitReady) error {
	s := &e.sleeper
	s.waiters.Add(1)
	defer s.waiters.Add(-1)

	// Only the poller arms: an arm by another goroutine after the poller
	// went to sleep can consume the event the poller sleeps for.
	s.pollMu.Lock()
	if s.polling {
		wake := s.wake
		s.wakeTaken = true
		s.pollMu.Unlock()
		// A wake-up the poller took before this waiter joined (a Detach's
		// signal, say) is not repeated: look once more before sleeping.
		if ready.ready() {
			return nil
		}
		select {
		case <-wake:
			return nil
		case <-ctx.Done():
			return ctxError(ready.name(), ctx.Err())
		}
	}
	s.polling = true
	s.pollMu.Unlock()
	defer func() {
		s.pollMu.Lock()
		s.polling = false
		if s.wakeTaken { // a new channel only when someone waits on this one
			close(s.wake)
			s.wake = make(chan struct{})
			s.wakeTaken = false
		}
		s.pollMu.Unlock()
	}()

	st := ucs.Status(e.arm())
	if st == ucs.ErrBusy {
		return nil
	}
	if err := errs.Status(st, "ucp: arm worker"); err != nil {
		return err
	}
	// A completion another goroutine's progress records from now on signals
	// the fd (waiters > 0), so one more look before sleeping loses nothing.
	if ready.ready() {
		return nil
	}

	// Sleep in Go's netpoller on the event fd. The sleep is bounded: the
	// guard timer signals the worker after pollTick (a lost wake-up then
	// costs one progress call), and a done ctx signals it at once.
	// The signals take no lock (a Close waiting for this sleep to end must
	// not block them): every caller of waitFor holds a reference on the
	// worker, and a signal that has started is waited for before returning.
	s.guardFired.Store(false)
	s.signals.Add(1)
	s.guard.Reset(pollTick)
	defer func() {
		if s.guard.Stop() {
			s.signals.Done() // never ran
		}
		s.signals.Wait()
	}()
	if ctx.Done() != nil && !ready.ctxWatched {
		s.signals.Add(1)
		stop := context.AfterFunc(ctx, s.ctxSignal)
		defer func() {
			if stop() {
				s.signals.Done()
			}
		}()
	}
	s.pollFirst = true
	if err := s.rc.Read(s.pollDone); err != nil {
		return &ucs.Error{Op: "ucp: wait on worker event fd", Err: ucs.ErrIOError, Wrapped: err}
	}
	if s.guardFired.Load() {
		s.tickWakeups.Add(1)
		s.idle.Store(true)
	} else {
		s.idle.Store(false)
	}
	if err := ctx.Err(); err != nil {
		return ctxError(ready.name(), err)
	}
	return nil
}

// initSleeper makes the guard timer and the callbacks of the sleeps,
// once, so that a sleep allocates nothing. Only the poller uses them.
func (e *engine) initSleeper() {
	s := &e.sleeper
	s.wake = make(chan struct{})
	s.guard = time.AfterFunc(time.Hour, func() {
		s.guardFired.Store(true)
		e.c.Signal()
		s.signals.Done()
	})
	s.guard.Stop()
	s.ctxSignal = func() {
		e.c.Signal()
		s.signals.Done()
	}
	// The netpoller calls it before sleeping (false: sleep) and after the
	// fd became readable (true: done).
	s.pollDone = func(uintptr) bool {
		if s.pollFirst {
			s.pollFirst = false
			return false
		}
		return true
	}
}
