package ucp

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"
	"weak"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/counters"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// ThreadMode is a UCS thread mode (ucs_thread_mode_t).
type ThreadMode int

// Thread modes a worker may be created with. The binding serializes every
// worker with a mutex anyway; Multi is for workers that C code also uses.
// UCX's single mode is not offered: goroutines move between OS threads, so
// it is never safe from Go.
const (
	ThreadSerialized ThreadMode = 1
	ThreadMulti      ThreadMode = 2
)

func (m ThreadMode) String() string {
	switch m {
	case 0:
		return "single"
	case ThreadSerialized:
		return "serialized"
	case ThreadMulti:
		return "multi"
	}
	return "ThreadMode(" + strconv.Itoa(int(m)) + ")"
}

// WorkerOption configures NewWorker.
type WorkerOption func(*workerOptions)

type workerOptions struct {
	mode ThreadMode
	spin time.Duration
	name string
}

// WithExpvarName publishes the worker's Stats through package expvar, as
// the key "worker.<name>" of the map "ucx" (beside share's exporters and
// importers, and "handles", ucs.LiveHandles), until Close. A name another
// worker of the process holds makes NewWorker fail with an error wrapping
// ucs.ErrAlreadyExists. A published worker stays reachable until Close.
func WithExpvarName(name string) WorkerOption {
	return func(o *workerOptions) { o.name = name }
}

// WithThreadMode sets the worker's UCS thread mode (default Serialized).
func WithThreadMode(m ThreadMode) WorkerOption {
	return func(o *workerOptions) { o.mode = m }
}

// WithSpin sets how long a wait on the worker (Request.Wait, Worker.Wait,
// Run, Flush) progresses before it sleeps on the event fd: default
// DefaultSpin. The sleep costs a wake-up of tens of microseconds through
// Go's netpoller; a worker that waits for a fast peer (an 8-byte get, a
// ping-pong) and can spare a core spins longer, as C programs' busy loops
// do. Zero or a negative d sleeps at once. A done ctx still ends the spin.
func WithSpin(d time.Duration) WorkerOption {
	return func(o *workerOptions) { o.spin = max(d, 0) }
}

// DefaultSpin is a worker's spin unless WithSpin says otherwise: long
// enough for an operation on shared memory, short enough that a worker
// waiting for an idle peer sleeps at once.
const DefaultSpin = 50 * time.Microsecond

// Worker is a UCP worker: a progress engine with its endpoints, listeners
// and active-message handlers.
type Worker struct {
	*engine // &res.State: the UCX worker, its lock and its sleeper (engine.go)
	res     *handle.Resource[engine]
	ctx     *Context
	spin    time.Duration // WithSpin

	// Progress bookkeeping, under the worker's lock (engine.ucx, taken in
	// engine.go only).
	seen       uint64                                    // shim events handled so far
	seenErrors uint64                                    // shim endpoint failures handled so far
	completed  uint64                                    // request completions seen so far
	eps        map[unsafe.Pointer]weak.Pointer[Endpoint] // weak: a dropped endpoint is collected
	published  string                                    // its expvar key (WithExpvarName), or ""
	handlers   map[AMID]*amHandler
	taken      []cgo.AMMessage // reused by progressRound

	// Active messages taken from the shim, in arrival order, for the one
	// goroutine that runs handlers at a time (the dispatcher).
	amPending   []*AMMessage
	amSpare     []*AMMessage // the dispatcher's buffer, reused
	dispatching bool

	peerAddrs   peerAddressChecker // ConnectWorker's check of peer addresses
	maxAMHeader int                // the largest header SendAM takes (ucp_worker_query)

	// The loopback endpoint LocalRegions share: weak, since
	// the endpoint holds the Worker and a dropped Worker must be collected.
	loopMu   sync.Mutex
	loop     weak.Pointer[loopback]
	loopDone bool // Close ran: no loopback is made any more
}

// enter is w.res.Enter for a Worker that may be nil: a nil Worker, like a
// zero one, is a closed one.
func (w *Worker) enter() bool { return w != nil && w.res.Enter() }

// NewWorker creates a worker of the context.
func (c *Context) NewWorker(opts ...WorkerOption) (*Worker, error) {
	const op = "ucp: create worker"
	o := workerOptions{mode: ThreadSerialized, spin: DefaultSpin}
	for _, opt := range opts {
		opt(&o)
	}
	if o.mode != ThreadSerialized && o.mode != ThreadMulti {
		return nil, errs.New(op, ucs.ErrInvalidParam, "thread mode %v: a worker is ThreadSerialized or ThreadMulti", o.mode)
	}
	if !c.enter() {
		return nil, closedError(op)
	}
	defer c.res.Exit()
	cw, st := c.c.CreateWorker(int(o.mode))
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	w := &Worker{ctx: c, spin: o.spin, eps: map[unsafe.Pointer]weak.Pointer[Endpoint]{}, handlers: map[AMID]*amHandler{}}
	w.res = handle.New(c.res, releaseWorker, engine{c: cw, rndv: map[unsafe.Pointer]struct{}{}})
	w.engine = &w.res.State
	// In place: the sleeps' callbacks point into the engine.
	w.initSleeper()
	if err := w.openEventFD(); err != nil {
		w.res.Close() // destroys the UCX worker
		return nil, err
	}
	// UCX 1.16 to 1.20 look up the handler of an arriving active message by
	// the id the peer sent, unchecked: a message to a worker that never had
	// a handler crashed it (SIGSEGV in ucp_am_handler, 1.16.0, 1.18.1 and
	// 1.19.1; an id past the table reads past it). 1.21 checks the id. A
	// table of every id (1.5 MiB), each set empty through the API, makes
	// UCX drop such messages, eager or rendezvous, as 1.21 does (a table
	// grown by one call marks its entries unfit for rendezvous, and the
	// sender of one got an error).
	if c.features&FeatureAM != 0 && ucs.LoadedVersion().Minor <= 20 {
		if err := errs.Status(ucs.Status(w.coverAMIDs()), op); err != nil {
			w.res.Close()
			return nil, err
		}
	}
	if c.features&FeatureAM != 0 {
		// Checked in Go: UCX checks it only when built with parameter
		// checks, and answers a bare "Invalid parameter" when it does.
		n, st := w.queryMaxAMHeader()
		if err := errs.Status(ucs.Status(st), op); err != nil {
			w.res.Close()
			return nil, err
		}
		w.maxAMHeader = n
	}
	runtime.AddCleanup(w, collectWorker, w.res)
	if o.name != "" {
		if err := counters.Publish("worker."+o.name, w, func() any { return w.Stats() }); err != nil {
			w.Close()
			return nil, errs.New(op, ucs.ErrAlreadyExists, "%v", err)
		}
		w.published = "worker." + o.name
	}
	return w, nil
}

// Stats are counters for diagnosing a worker's waits.
type Stats struct {
	// TickWakeups counts sleeps on the event fd that ended by the 50 ms
	// guard tick rather than an event: each is a wake-up UCX did not signal.
	TickWakeups int64 `json:"tick_wakeups"`
	// AMDropped counts active messages the shim could not queue (out of memory).
	AMDropped int64 `json:"am_dropped"`
	// Abandoned is the number of requests handed to the worker now: their
	// waiters gave up (a ctx ended, Detach, a dropped Request), and the
	// worker releases each once UCX completes it. One that stays names a
	// peer that neither answers nor fails.
	Abandoned int64 `json:"abandoned"`
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	if w == nil || w.engine == nil {
		return Stats{} // a nil or zero Worker
	}
	st := Stats{TickWakeups: int64(w.tickWakeups.Load())}
	if w.enter() { // the shim's counter lives with the UCX worker
		st.AMDropped, st.Abandoned = w.counters()
		w.res.Exit()
	}
	return st
}

// Context is the worker's context.
func (w *Worker) Context() *Context {
	if w == nil {
		return nil
	}
	return w.ctx
}

// PackAddress is the worker's packed address, for ConnectWorker on a peer.
func (w *Worker) PackAddress() (WorkerAddress, error) {
	const op = "ucp: worker address"
	if !w.enter() {
		return nil, closedError(op)
	}
	defer w.res.Exit()
	raw, st := w.address()
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	return WorkerAddressFromUCX(raw), nil
}

// Progress runs one round of UCX progress and dispatches what it brought
// (active messages to their handlers, endpoint errors); it returns the
// number of events UCX reported. Handlers run one at a time, in the order
// the messages arrived: while another goroutine runs handlers, it runs
// these too, and Progress returns without waiting for them.
func (w *Worker) Progress() (int, error) {
	if !w.enter() {
		return 0, closedError("ucp: progress worker")
	}
	n, dispatcher := w.progressRound(cgo.Request{}, 1)
	w.res.Exit()
	if dispatcher {
		w.dispatchPending()
	}
	return n, nil
}

// progress is Progress for callers already inside Enter.
func (w *Worker) progress() int { return w.spinOnce(cgo.Request{}, 1) }

// spinOnce is up to rounds progress calls in one crossing (see cgo Spin),
// then what every progress is followed by: messages dispatched,
// completions noted, abandoned requests reaped.
func (w *Worker) spinOnce(req cgo.Request, rounds uint) int {
	n, dispatcher := w.progressRound(req, rounds)
	if dispatcher {
		w.dispatchPending()
	}
	return n
}

// Wait blocks until the worker has progressed something, or may have
// (its event fd fired, or the 50 ms guard against a missed wake-up
// passed), or ctx is done; the worker sleeps on its event fd meanwhile. A
// nil return does not say anything happened: loop on Wait as Run does. The
// worker's Close ends a Wait asleep with an error wrapping ucs.ErrClosed.
func (w *Worker) Wait(ctx context.Context) error {
	if !w.enter() {
		return closedError("ucp: wait on worker")
	}
	defer w.res.Exit()
	if err := w.waitFor(ctx, waitReady{op: "ucp: wait on worker", endOnClose: true}); err != nil {
		return err
	}
	if w.res.Closing() {
		return closedError("ucp: wait on worker")
	}
	return nil
}

// Run progresses the worker until ctx is done (it then returns nil) or the
// worker is closed (it returns an error wrapping ucs.ErrClosed), sleeping
// when idle. A side that owns memory its peers access runs it in a
// goroutine.
func (w *Worker) Run(ctx context.Context) error {
	if !w.enter() {
		return closedError("ucp: run worker")
	}
	// One watch of ctx for every round: its end signals the worker, so the
	// rounds' sleeps allocate nothing. The signal touches UCX only while it
	// holds a reference on the worker, so it is safe after Run returned.
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			if w.res.Enter() {
				w.signal()
				w.res.Exit()
			}
		})
		defer stop()
	}
	for {
		err := w.waitFor(ctx, waitReady{op: "ucp: run worker", endOnClose: true, ctxWatched: true})
		w.res.Exit()
		// Between rounds Close may take the worker: Run then ends.
		if err == nil && !w.enter() {
			return closedError("ucp: run worker")
		}
		if err != nil {
			var ue *ucs.Error
			if errors.As(err, &ue) && ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// Flush waits until every operation the worker started is complete
// remotely.
func (w *Worker) Flush(ctx context.Context) error {
	const op = "ucp: flush worker"
	if !w.enter() {
		return closedError(op)
	}
	r := w.flush()
	w.res.Ref() // the flush's, dropped by await
	w.res.Exit()
	return w.await(ctx, op, r, nil)
}

// Close closes the worker; its UCX object goes when its endpoints,
// listeners, requests and LocalRegions are done too (an open LocalRegion
// keeps working until its Close). A Run, Wait, Listener.Accept or
// AMQueue.Receive on the worker wakes at once and returns an error wrapping
// ucs.ErrClosed; requests, flushes and closes in progress (an
// Endpoint.UnpackRemoteKey or UnpackRegion waiting for its endpoint's
// wire-up among them) go on being progressed until they complete or their
// ctx ends. Nothing else progresses a closed worker, so a peer's operation
// that needs this side (its flush, its get) waits until this side's
// endpoints are closed or peer error handling gives up on them. Called from an active-message handler, Close marks
// the worker closed and returns, and finishes once the wait that ran the
// handler (Run, say) has ended.
func (w *Worker) Close() error {
	if w == nil || w.res == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	// Hold a reference across the close, so that the UCX worker is still
	// there to drain if requests were abandoned to it.
	if !w.enter() {
		return nil
	}
	w.res.Ref()
	w.res.Exit()
	if w.published != "" {
		counters.Unpublish(w.published, w)
	}
	w.closeLoopback()
	inHandler := w.isDispatching()
	if inHandler {
		// A handler may be the caller, run by a wait in flight on the
		// worker (Run, say), which the close would wait for: mark the
		// worker closed now (Enter fails from here on) and finish once
		// that wait has ended.
		w.res.MarkClosing(w.signal)
		go w.finishClose()
		return nil
	}
	w.finishClose()
	return nil
}

// finishClose is Close after its reference was taken.
func (w *Worker) finishClose() {
	// Wake a goroutine asleep in Run or Wait: it sees Closing and ends now
	// instead of at its next guard tick.
	if w.res.CloseWaking(w.signal) {
		dropRendezvous(w.res)
		startDrain(w.res)
	}
	w.res.Release()
}
