package ucp

import (
	"github.com/ucxgo/ucx/internal/errs"
	"runtime"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// AMHandler handles active messages of one id. It runs inside Progress on
// the progressing goroutine and must not block; it may send, and may start
// the receive of rendezvous data (AMMessage.ReceiveInto). msg is valid
// until the handler returns (its Header and Data may be kept).
type AMHandler func(msg *AMMessage)

type amHandler struct {
	fn AMHandler
	c  cgo.AMHandler
}

// SetAMHandler installs (or replaces) the handler for id.
func (w *Worker) SetAMHandler(id uint, fn AMHandler) error {
	const op = "ucp: set active-message handler"
	if fn == nil {
		return errs.New(op, ucs.ErrInvalidParam, "nil handler")
	}
	if !w.res.Enter() {
		return closedError(op)
	}
	defer w.res.Exit()
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.handlers[id]; ok {
		h.fn = fn
		return nil
	}
	c, st := w.c.SetAMHandler(id)
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return err
	}
	w.handlers[id] = &amHandler{fn: fn, c: c}
	return nil
}

// ClearAMHandler removes the handler for id; later messages are dropped by UCX.
func (w *Worker) ClearAMHandler(id uint) error {
	if !w.res.Enter() {
		return closedError("ucp: clear active-message handler")
	}
	defer w.res.Exit()
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.handlers[id]; ok {
		w.c.ClearAMHandler(id, h.c)
		delete(w.handlers, id)
	}
	return nil
}

// AMMessage is a received active message.
type AMMessage struct {
	ID     uint
	Header []byte // copied out of UCX; the handler may keep it
	// Data is the payload of an eager message (copied; the handler may keep
	// it). A rendezvous message has no Data: receive it with ReceiveInto.
	Data []byte

	w        *Worker
	length   int
	rndv     bool
	desc     unsafe.Pointer
	reply    *Endpoint
	consumed bool
}

// Len is the payload length (also of a rendezvous message).
func (m *AMMessage) Len() int { return m.length }

// IsRendezvous reports whether the payload still waits in the sender.
func (m *AMMessage) IsRendezvous() bool { return m.rndv }

// Reply is the endpoint to answer on (sender used AMReply), or nil.
func (m *AMMessage) Reply() *Endpoint { return m.reply }

// ReceiveInto receives the payload into buf (len(buf) >= Len()). For an
// eager message it copies Data and returns a completed request; for a
// rendezvous message it starts the transfer, which the returned request
// completes. Call it from the handler.
func (m *AMMessage) ReceiveInto(buf []byte) (Request, error) {
	const op = "ucp: receive active-message data"
	if len(buf) < m.length {
		return Request{}, errs.New(op, ucs.ErrBufferTooSmall, "buffer is %d bytes, message %d", len(buf), m.length)
	}
	if !m.rndv {
		copy(buf, m.Data)
		return completedRequest(op, ucs.OK, uint64(len(m.Data))), nil
	}
	if m.consumed {
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "data already received or dropped")
	}
	m.consumed = true
	p, pin := pinBytes(buf[:m.length])
	return m.receive(op, p, cgo.MemHandle{}, pin, nil), nil
}

// ReceiveIntoMem receives the payload into mapped memory at off.
func (m *AMMessage) ReceiveIntoMem(mem *Mem, off int) (Request, error) {
	const op = "ucp: receive active-message data"
	// Entered once: the copy or the transfer happens before Close unmaps.
	if !mem.res.Enter() {
		return Request{}, closedError(op)
	}
	defer mem.res.Exit()
	b, err := mem.bytes(op)
	if err != nil {
		return Request{}, err
	}
	if off < 0 || off+m.length > len(b) {
		return Request{}, errs.New(op, ucs.ErrOutOfRange, "%d bytes at offset %d do not fit a %d-byte mapping", m.length, off, len(b))
	}
	if !m.rndv {
		copy(b[off:], m.Data)
		return completedRequest(op, ucs.OK, uint64(len(m.Data))), nil
	}
	if m.consumed {
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "data already received or dropped")
	}
	m.consumed = true
	return m.receive(op, unsafe.Add(mem.addr, off), mem.res.State.h, nil, &mem.res), nil
}

func (m *AMMessage) receive(op string, p unsafe.Pointer, memh cgo.MemHandle, pin *runtime.Pinner, mem handle.Parent) Request {
	w := m.w
	w.mu.Lock()
	r := w.c.AMRecvData(m.desc, p, uintptr(m.length), memh)
	w.mu.Unlock()
	req := newRequest(w, r, op, pin, mem)
	w.res.Release() // the message's reference; an in-flight request has its own
	return req
}

// Drop discards rendezvous data that will not be received (done for the
// handler when it returns without receiving).
func (m *AMMessage) Drop() {
	if !m.rndv || m.consumed {
		return
	}
	m.consumed = true
	m.w.mu.Lock()
	m.w.c.AMDataRelease(m.desc)
	m.w.mu.Unlock()
	m.w.res.Release()
}

// amMessage is a message taken from the shim's queue, with its reply
// endpoint resolved while the worker was locked.
type amMessage struct {
	cgo.AMMessage
	Reply *Endpoint
	msg   AMMessage // what the handler gets: part of the reused buffer
}

// dispatch runs the handlers of messages taken from the shim's queue, then
// gives the buffer back to the worker.
func (w *Worker) dispatch(msgs []amMessage) {
	for i := range msgs {
		cm := &msgs[i]
		cm.msg = AMMessage{ID: cm.ID, Header: cm.Header, Data: cm.Data, w: w,
			length: cm.Length, rndv: cm.Rndv, desc: cm.DataDesc, reply: cm.Reply}
		w.mu.Lock()
		h := w.handlers[cm.ID]
		w.mu.Unlock()
		if h != nil {
			h.fn(&cm.msg)
		}
		cm.msg.Drop()
	}
	clear(msgs)
	w.mu.Lock()
	if w.msgs == nil {
		w.msgs = msgs[:0]
	}
	w.mu.Unlock()
}

// AMSendFlags tune SendAM.
type AMSendFlags uint

// Active-message send flags (UCP_AM_SEND_FLAG_*).
const (
	AMReply AMSendFlags = 0x1 // the receiver gets a reply endpoint
	AMEager AMSendFlags = 0x2 // force the eager protocol
	AMRndv  AMSendFlags = 0x4 // force the rendezvous protocol
)
