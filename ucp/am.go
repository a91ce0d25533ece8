package ucp

import (
	"context"
	"fmt"
	"github.com/ucxgo/ucx/internal/errs"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// AMID identifies a kind of active message: a handler or queue on the
// receiving worker takes the messages a peer sends with its id.
type AMID uint16

// AMHandler handles active messages of one id. Handlers run one at a time,
// in the order the messages arrived, on one of the goroutines progressing
// the worker (Run, Progress, a blocking call), and must not block: while
// one runs, no other message is dispatched (code that would wait, for
// a lock, a channel or a Request, uses an AMQueue instead); it may send,
// may start the receive of rendezvous data (AMMessage.ReceiveInto), and
// may close the worker (Worker.Close returns at once, and the close
// finishes when the wait that ran the handler has ended).
// msg may be kept, but rendezvous data not received by the time the
// handler returns is dropped (a later ReceiveInto is an error).
type AMHandler func(msg *AMMessage)

type amHandler struct {
	fn    AMHandler
	c     cgo.AMHandler
	queue *AMQueue // the queue the id is routed to, if any
}

// SetAMHandler installs (or replaces) the handler for id. An id routed to
// an open AMQueue is refused (ucs.ErrAlreadyExists) until the queue is
// closed.
func (w *Worker) SetAMHandler(id AMID, fn AMHandler) error {
	return w.setHandler("ucp: set active-message handler", id, fn, nil)
}

func (w *Worker) setHandler(op string, id AMID, fn AMHandler, q *AMQueue) error {
	if fn == nil {
		return errs.New(op, ucs.ErrInvalidParam, "nil handler")
	}
	if !w.enter() {
		return closedError(op)
	}
	defer w.res.Exit()
	if w.ctx.features&FeatureAM == 0 {
		return errs.New(op, ucs.ErrUnsupported, "the context was made without FeatureAM (see WithFeatures)")
	}
	h, st := w.routeAM(id, fn, q)
	if h != nil {
		return errs.New(op, ucs.ErrAlreadyExists, "id %d already has a %s", id, h.kind())
	}
	return errs.Status(ucs.Status(st), op)
}

func (h *amHandler) kind() string {
	if h.queue != nil {
		return "queue (close it first)"
	}
	return "handler"
}

// ClearAMHandler removes the handler for id; later messages are dropped by
// UCX (see SendAM). An id routed to an open AMQueue is refused
// (ucs.ErrAlreadyExists): the queue's Close clears it.
func (w *Worker) ClearAMHandler(id AMID) error {
	return w.clearHandler("ucp: clear active-message handler", id, nil)
}

// clearHandler removes id's routing if it is q's (a handler's for nil).
func (w *Worker) clearHandler(op string, id AMID, q *AMQueue) error {
	if !w.enter() {
		return closedError(op)
	}
	defer w.res.Exit()
	if w.unrouteAM(id, q) {
		return errs.New(op, ucs.ErrAlreadyExists, "id %d is routed to a queue (close it instead)", id)
	}
	return nil
}

// AMMessage is a received active message. One made by hand, to test a
// handler without a peer, is an eager message: ReceiveInto copies its Data.
type AMMessage struct {
	ID     AMID
	Header []byte // copied out of UCX; the handler may keep it
	// Data is the payload of an eager message (copied; the handler may keep
	// it). A rendezvous message has no Data: receive it with ReceiveInto.
	Data []byte

	w        *Worker
	length   int
	rndv     bool
	desc     unsafe.Pointer
	reply    *Endpoint
	consumed atomic.Bool // set by the one ReceiveInto, ReceiveIntoMem or Drop that takes the data
	queued   bool        // a queue took it, with its rendezvous data: dispatch leaves it
}

// Len is the payload length (also of a rendezvous message).
func (m *AMMessage) Len() int {
	if m == nil {
		return 0
	}
	if m.rndv {
		return m.length
	}
	return len(m.Data) // also of a message made by hand
}

// IsRendezvous reports whether the payload still waits in the sender.
func (m *AMMessage) IsRendezvous() bool { return m != nil && m.rndv }

// Reply is the endpoint to answer on (sender used AMReply), or nil.
func (m *AMMessage) Reply() *Endpoint {
	if m == nil {
		return nil
	}
	return m.reply
}

// ReceiveInto receives the payload into buf (len(buf) >= Len()). For an
// eager message it copies Data and returns a completed request; for a
// rendezvous message it starts the transfer, which the returned request
// completes. Call it from the handler (the data is dropped when the
// handler returns) or on a message an AMQueue returned; after the worker's
// Close it returns an error wrapping ucs.ErrClosed.
func (m *AMMessage) ReceiveInto(buf []byte) (Request, error) {
	const op = "ucp: receive active-message data"
	if m == nil {
		return Request{}, errNilMessage(op)
	}
	if len(buf) < m.Len() {
		return Request{}, errs.New(op, ucs.ErrBufferTooSmall, "buffer is %d bytes, message %d", len(buf), m.Len())
	}
	if !m.rndv {
		copy(buf, m.Data)
		return completedRequest(op, ucs.OK, uint64(len(m.Data))), nil
	}
	if !m.consumed.CompareAndSwap(false, true) {
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "data already received or dropped")
	}
	p, pin := pinBytes(buf[:m.length])
	return m.receive(op, p, cgo.MemHandle{}, pin, nil)
}

// ReceiveIntoMem receives the payload into the range dst (dst.Len() >=
// Len()), as ReceiveInto does into a slice.
func (m *AMMessage) ReceiveIntoMem(dst MemRange) (Request, error) {
	const op = "ucp: receive active-message data"
	if m == nil {
		return Request{}, errNilMessage(op)
	}
	if dst.n < m.Len() {
		return Request{}, errs.New(op, ucs.ErrBufferTooSmall, "the range is %d bytes, message %d", dst.n, m.Len())
	}
	// Entered once: the copy or the transfer happens before Close unmaps.
	p, err := dst.enter(op, m.w.context())
	if err != nil {
		return Request{}, err
	}
	defer dst.m.res.Exit()
	if _, err := dst.m.bytes(op); err != nil {
		return Request{}, err
	}
	if !m.rndv {
		copy(unsafe.Slice((*byte)(p), dst.n), m.Data)
		return completedRequest(op, ucs.OK, uint64(len(m.Data))), nil
	}
	if !m.consumed.CompareAndSwap(false, true) {
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "data already received or dropped")
	}
	return m.receive(op, p, dst.m.res.State.h, nil, &dst.m.res)
}

func errNilMessage(op string) error { return errs.New(op, ucs.ErrInvalidParam, "nil message") }

func (m *AMMessage) receive(op string, p unsafe.Pointer, memh cgo.MemHandle, pin *runtime.Pinner, mem handle.Parent) (Request, error) {
	w := m.w
	r, claimed := w.recvRendezvous(m.desc, p, uintptr(m.length), memh)
	if !claimed {
		if pin != nil {
			unpin(pin)
		}
		return Request{}, errs.New(op, ucs.ErrClosed, "the worker was closed, and its unreceived rendezvous data dropped")
	}
	req := newRequest(w, r, op, pin, mem)
	w.res.Release() // the message's reference; an in-flight request has its own
	return req, nil
}

// Drop discards rendezvous data that will not be received (done for the
// handler when it returns without receiving, and for every message not
// yet received when the worker is closed).
func (m *AMMessage) Drop() {
	if m == nil || !m.rndv || !m.consumed.CompareAndSwap(false, true) {
		return
	}
	if m.w.releaseRendezvous(m.desc) {
		m.w.res.Release()
	}
}

// newAMMessage copies a message out of the shim's C memory into Go memory
// of its own (handlers may keep the message, its Header and its Data):
// the message, and header and data together in a second allocation with
// no pointers, which the handler may pass to C (echo it with SendAM, say):
// cgo refuses memory that holds Go pointers, such as the message's own.
// Header and Data are capped, so appending to one never writes into the
// other. Called with the worker's lock held (progressRound), while m's
// views of C memory are valid.
func (w *Worker) newAMMessage(m *cgo.AMMessage) *AMMessage {
	msg := &AMMessage{ID: AMID(m.ID), w: w, length: m.Length, rndv: m.Rndv, desc: m.DataDesc}
	h, n := len(m.Header), len(m.Header)+len(m.Data)
	if n == 0 {
		return msg
	}
	b := make([]byte, n)
	copy(b, m.Header)
	copy(b[h:], m.Data)
	if m.Header != nil {
		msg.Header = b[:h:h]
	}
	if m.Data != nil {
		msg.Data = b[h:n:n]
	}
	return msg
}

// dispatchPending runs the handlers of the messages progress took, one
// message at a time, in the order UCX delivered them, until none is left.
// Only the goroutine progressRound made the dispatcher calls it; other
// goroutines that progress meanwhile (a handler that progresses the worker
// included) leave their messages to it. Two dispatchers would run
// handlers concurrently and deliver in either order (an AMQueue got 1 MiB
// and 3 MiB messages swapped, 10 runs in 60, with Run and Receive both
// progressing).
//
// Handlers run without the worker's lock. Each message is its own
// allocation (newAMMessage), not a slot of a reused buffer: a handler that
// keeps one (as Go code keeps what it is given) never sees the next
// message's fields written under it.
//
// A handler that panics ends the dispatch (the panic goes on to the
// caller): its message is done with, as if it had returned, and the rest
// of its batch go back to the head of the queue, for the next progress's
// dispatcher.
func (w *Worker) dispatchPending() {
	var msgs []*AMMessage
	next := 0 // msgs[next:] are not dispatched yet
	defer func() {
		if msgs != nil { // a handler panicked
			if m := msgs[next-1]; !m.queued {
				m.Drop()
			}
			w.requeuePending(msgs[next:])
		}
	}()
	for msgs = w.nextPending(nil); msgs != nil; msgs = w.nextPending(msgs) {
		for next = 0; next < len(msgs); {
			msg := msgs[next]
			next++
			if fn := w.amHandlerFn(msg.ID); fn != nil {
				fn(msg)
			}
			if !msg.queued {
				msg.Drop()
			}
		}
	}
}

// AMSendFlags tune SendAM.
type AMSendFlags uint

// Active-message send flags (UCP_AM_SEND_FLAG_*).
const (
	AMReply AMSendFlags = 0x1 // the receiver gets a reply endpoint
	AMEager AMSendFlags = 0x2 // force the eager protocol
	AMRndv  AMSendFlags = 0x4 // force the rendezvous protocol
)

// AMQueue receives the active messages of one id by pull, for code that
// would rather wait for a message than be called with it: Receive returns
// the next one, progressing the worker while it waits. Messages that
// arrive while nobody receives are kept in order, without limit (UCX has
// already handed them over). A rendezvous message must be received
// (ReceiveInto) or dropped (Drop): until then its data waits in the
// sender; the queue's or the worker's Close drops what nobody received.
type AMQueue struct {
	w      *Worker
	id     AMID
	op     string
	mu     sync.Mutex
	msgs   []*AMMessage
	queued atomic.Int32
	closed atomic.Bool
}

// OpenAMQueue routes the worker's messages of id to a new queue, in place
// of a handler: an id that has a handler or an open queue is refused
// (ucs.ErrAlreadyExists), and the queue's Close frees the id.
func (w *Worker) OpenAMQueue(id AMID) (*AMQueue, error) {
	q := &AMQueue{w: w, id: id, op: fmt.Sprintf("ucp: receive active message %d", id)}
	if err := w.setHandler("ucp: open active-message queue", id, q.push, q); err != nil {
		return nil, err
	}
	return q, nil
}

// push runs in dispatch: the queue keeps the message (dispatch's own
// allocation), with its rendezvous data.
func (q *AMQueue) push(m *AMMessage) {
	m.queued = true
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		m.Drop()
		return
	}
	q.msgs = append(q.msgs, m)
	q.queued.Add(1)
	q.mu.Unlock()
	if q.w.waiters.Load() > 0 {
		q.w.signal() // a Receive may sleep on the event fd
	}
}

func (q *AMQueue) ready() bool { return q.queued.Load() > 0 || q.closed.Load() }

// Receive returns the next message, waiting for it within ctx. After the
// queue's or the worker's Close it returns an error wrapping ucs.ErrClosed.
func (q *AMQueue) Receive(ctx context.Context) (*AMMessage, error) {
	if q == nil || q.w == nil {
		return nil, closedError("ucp: receive active message") // a zero queue
	}
	for {
		// Closed first: messages still queued when the worker closed are
		// not handed out (their rendezvous data is gone with it).
		if q.closed.Load() || q.w.res.Closing() {
			return nil, closedError(q.op)
		}
		q.mu.Lock()
		if len(q.msgs) > 0 {
			m := q.msgs[0]
			q.msgs[0] = nil
			q.msgs = q.msgs[1:]
			q.queued.Add(-1)
			q.mu.Unlock()
			return m, nil
		}
		q.mu.Unlock()
		if q.closed.Load() || !q.w.res.Enter() {
			return nil, closedError(q.op)
		}
		err := q.w.waitFor(ctx, waitReady{op: q.op, queue: q, endOnClose: true})
		q.w.res.Exit()
		if err != nil {
			return nil, err
		}
	}
}

// Close stops routing messages to the queue (later ones are dropped by
// UCX, as with no handler: see SendAM), drops the rendezvous data of
// messages nobody received, and wakes a waiting Receive, which returns
// ucs.ErrClosed.
func (q *AMQueue) Close() error {
	if q == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	if q.w == nil || q.closed.Swap(true) {
		return nil // a zero queue, or closed
	}
	q.w.clearHandler("ucp: close active-message queue", q.id, q) // a closed worker's handlers go with it
	q.mu.Lock()
	pending := q.msgs
	q.msgs = nil
	q.queued.Store(0)
	q.mu.Unlock()
	for _, m := range pending {
		m.Drop()
	}
	if q.w.res.Enter() {
		q.w.signal()
		q.w.res.Exit()
	}
	return nil
}
