package ucp

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// The data path. Operations from mapped memory (RemoteRegion's PutMem and
// GetMem, SendAMMem, ReceiveIntoMem) pass the mapping's memh to UCX
// (UCP_OP_ATTR_FIELD_MEMH, the only way to use imported memory locally) and
// allocate nothing; the []byte forms pin the slice for the life of the
// operation (a short tagged or active-message send that UCX completes
// within the call is not pinned: sendGo). RMA is reached through a RemoteRegion only (the remote
// address and key travel together); the endpoint's raw calls below are the
// layer under it.

// MemRange is n bytes of a mapping at off: the local side of every call
// that moves a mapping's bytes (RemoteRegion.PutMem and GetMem,
// Endpoint.SendAMMem, SendTagMem, SendStreamMem and RecvStreamMem,
// Worker.RecvTagMem, AMMessage.ReceiveIntoMem). Make one with Mem.Range;
// it is a value, and is checked by the call that uses it (the mapping
// open, of the worker's Context, off and n within it), which then fails
// with ucs.ErrClosed, ucs.ErrInvalidParam or ucs.ErrOutOfRange.
// A typed range keeps the local range and the remote offset apart: the
// compiler refuses one passed for the other.
type MemRange struct {
	m      *Mem
	off, n int
}

// Range is the n bytes of m at off (see MemRange).
func (m *Mem) Range(off, n int) MemRange { return MemRange{m, off, n} }

// Mem is the mapping the range is of.
func (r MemRange) Mem() *Mem { return r.m }

// Off is where the range starts in its mapping.
func (r MemRange) Off() int { return r.off }

// Len is the range's length.
func (r MemRange) Len() int { return r.n }

// enter enters the range's mapping, which must be of ctx (the worker's
// context; nil for a zero Endpoint or Worker, whose own check then fails
// the call), and returns the range's first byte: Exit the mapping's handle
// when done.
func (r MemRange) enter(op string, ctx *Context) (unsafe.Pointer, error) {
	if err := r.m.enter(op); err != nil {
		return nil, err
	}
	if ctx != nil && r.m.ctx != ctx {
		// Its memh is another context's: UCX would take it unchecked.
		r.m.res.Exit()
		return nil, errs.New(op, ucs.ErrInvalidParam, "the mapping is of another Context than the worker's")
	}
	p, err := r.m.span(op, r.off, r.n)
	if err != nil {
		r.m.res.Exit()
		return nil, err
	}
	return p, nil
}

// pinners recycles the Pinners of the []byte forms, so that they allocate
// nothing per operation, and keeps every Pinner it made reachable for good.
// A request that never completes (dropped without Wait, or abandoned to a
// worker that is then dropped) must not let the GC collect a Pinner that
// still pins: the runtime answers that with a panic. Its buffer stays
// pinned instead, a leak the stuck request causes, never a crash. There are
// as many Pinners as operations on Go memory were ever in flight at once.
var pinners struct {
	mu   sync.Mutex
	all  []*runtime.Pinner
	free []*runtime.Pinner
}

func getPinner() *runtime.Pinner {
	pinners.mu.Lock()
	defer pinners.mu.Unlock()
	if n := len(pinners.free); n > 0 {
		p := pinners.free[n-1]
		pinners.free = pinners.free[:n-1]
		return p
	}
	p := new(runtime.Pinner)
	pinners.all = append(pinners.all, p)
	return p
}

// pinBytes pins b for an operation that outlives the cgo call.
func pinBytes(b []byte) (unsafe.Pointer, *runtime.Pinner) {
	if len(b) == 0 {
		return nil, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	pin := getPinner()
	pin.Pin(p)
	return p, pin
}

func unpin(pin *runtime.Pinner) {
	pin.Unpin()
	pinners.mu.Lock()
	pinners.free = append(pinners.free, pin)
	pinners.mu.Unlock()
}

// rmaMem is a put or get of r at raddr.
func (ep *Endpoint) rmaMem(op string, put bool, r MemRange, raddr uint64, rkey *RemoteKey) (Request, error) {
	p, err := r.enter(op, ep.context())
	if err != nil {
		return Request{}, err
	}
	defer r.m.res.Exit()
	return ep.rma(op, put, p, r.n, r.m.res.State.h, raddr, rkey, nil, &r.m.res)
}

// rmaBytes is a put or get of b at raddr; b is pinned until it completes.
func (ep *Endpoint) rmaBytes(op string, put bool, b []byte, raddr uint64, rkey *RemoteKey) (Request, error) {
	return pinnedGo(b, func(p unsafe.Pointer, pin *runtime.Pinner) (Request, error) {
		return ep.rma(op, put, p, len(b), cgo.MemHandle{}, raddr, rkey, pin, nil)
	})
}

// pinnedGo starts an operation on the Go bytes b pinned until it
// completes; start gets b's data and the pinner (nil for no bytes), which
// is let go of if start fails.
func pinnedGo(b []byte, start func(p unsafe.Pointer, pin *runtime.Pinner) (Request, error)) (Request, error) {
	p, pin := pinBytes(b)
	req, err := start(p, pin)
	if err != nil && pin != nil {
		unpin(pin)
	}
	return req, err
}

// immMax is the longest Go buffer that a tagged or active-message send
// first offers UCX to complete within the call
// (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL): UCX then either copies it out before
// returning or refuses with UCS_ERR_NO_RESOURCE having kept nothing of it
// and made no request (ucp_tag_send_nbx and ucp_am_send_nbx look at the
// flag before choosing a protocol, 1.16 to 1.22), so the buffer needs no
// pin. Pinning (a runtime record per buffer, set and cleared) cost more
// than the rest of a short send. UCX completes within the call what fits
// one short message: about 100 bytes on shared memory, more on tcp; a
// refused buffer costs one more crossing, and is pinned and sent again.
// Streams and puts are not offered: with protocol selection v2 their
// calls ignore the flag (stream_send.c on 1.16 to 1.22, rma_send.c on
// 1.16 and 1.17) and keep the buffer in a request.
const immMax = 1024

// errNotImmediate is start's answer when UCX refused to complete an imm
// operation within the call.
var errNotImmediate = errors.New("ucp: not completed within the call")

// sendGo starts an operation that reads the Go bytes b: a short b
// unpinned with imm, then (refused so, or long) pinned until the
// operation completes. start gets b's data, the pinner or nil, and imm.
func sendGo(b []byte, start func(p unsafe.Pointer, pin *runtime.Pinner, imm bool) (Request, error)) (Request, error) {
	if n := len(b); n > 0 && n <= immMax {
		req, err := start(unsafe.Pointer(unsafe.SliceData(b)), nil, true)
		if err != errNotImmediate {
			return req, err
		}
	}
	return pinnedGo(b, func(p unsafe.Pointer, pin *runtime.Pinner) (Request, error) {
		return start(p, pin, false)
	})
}

// refusedImmediate reports whether r is UCX's refusal of an imm operation.
// An imm operation that UCX kept all the same (a release that ignores the
// flag) has its buffer pinned at once, into *pin: the caller's frame holds
// the buffer meanwhile, and Go does not move heap memory.
func refusedImmediate(imm bool, r cgo.Request, p unsafe.Pointer, pin **runtime.Pinner) bool {
	switch {
	case !imm:
		return false
	case r.P != nil:
		*pin = getPinner()
		(*pin).Pin(p)
		return false
	}
	return ucs.Status(r.St) == ucs.ErrNoResource
}

func (ep *Endpoint) rma(op string, put bool, p unsafe.Pointer, n int, memh cgo.MemHandle, raddr uint64, rkey *RemoteKey, pin *runtime.Pinner, mem handle.Parent) (Request, error) {
	if rkey == nil {
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "nil remote key")
	}
	if err := rkey.checkBounds(op, raddr, n); err != nil {
		return Request{}, err // a key from UnpackRegion, whichever call uses it
	}
	if !rkey.res.Enter() {
		return Request{}, closedError(op)
	}
	defer rkey.res.Exit()
	if err := ep.enter(op); err != nil {
		return Request{}, err
	}
	defer ep.res.Exit()
	if rkey.res.State.ep != ep.id {
		// UCX takes the key's lanes from the endpoint it was unpacked on and
		// applies them to this one unchecked.
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "the remote key was unpacked on another endpoint")
	}
	r := ep.w.rma(ep.c, put, p, n, memh, raddr, rkey.res.State.c)
	req := newRequest(ep.w, r, op, pin, mem, rkey.res)
	if r.P != nil {
		req.p.fl.ops = ep.res.State.ops
		req.p.fl.ops.add(r, !put)
	}
	return req, nil
}

// SendAM sends an active message with header and data to handler id on
// the peer. The header is copied by UCX; data is pinned until completion.
// A header over the largest the worker's UCX sends in one message
// (ucp_worker_query's max_am_header, some KiB) is refused with
// ucs.ErrInvalidParam, and a context without FeatureAM refuses every send
// with ucs.ErrUnsupported.
// A message to an id the peer has no handler or queue for is dropped
// there, and its request completes, except a rendezvous one (large data),
// whose request fails with ucs.ErrInvalidParam: UCX's answer on every
// release.
func (ep *Endpoint) SendAM(id AMID, header, data []byte, flags AMSendFlags) (Request, error) {
	return sendGo(data, func(p unsafe.Pointer, pin *runtime.Pinner, imm bool) (Request, error) {
		return ep.sendAM(id, header, p, len(data), cgo.MemHandle{}, flags, pin, nil, imm)
	})
}

// SendAMMem sends an active message whose data is the range src.
func (ep *Endpoint) SendAMMem(id AMID, header []byte, src MemRange, flags AMSendFlags) (Request, error) {
	const op = "ucp: send active message"
	p, err := src.enter(op, ep.context())
	if err != nil {
		return Request{}, err
	}
	defer src.m.res.Exit()
	return ep.sendAM(id, header, p, src.n, src.m.res.State.h, flags, nil, &src.m.res, false)
}

func (ep *Endpoint) sendAM(id AMID, header []byte, p unsafe.Pointer, n int, memh cgo.MemHandle, flags AMSendFlags, pin *runtime.Pinner, mem handle.Parent, imm bool) (Request, error) {
	const op = "ucp: send active message"
	if err := ep.enter(op); err != nil {
		return Request{}, err
	}
	defer ep.res.Exit()
	if ep.w.ctx.features&FeatureAM == 0 {
		return Request{}, errs.New(op, ucs.ErrUnsupported, "the context was made without FeatureAM (see WithFeatures)")
	}
	if len(header) > ep.w.maxAMHeader {
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "a %d-byte header is over the %d bytes this worker's UCX sends in one (send the rest as data)", len(header), ep.w.maxAMHeader)
	}
	// The header goes to C from the worker's own buffer (amSend).
	r := ep.w.amSend(ep.c, id, header, p, n, memh, flags, imm)
	if refusedImmediate(imm, r, p, &pin) {
		return Request{}, errNotImmediate
	}
	req := newRequest(ep.w, r, op, pin, mem)
	if r.P != nil {
		req.p.fl.ops = ep.res.State.ops
		req.p.fl.ops.add(r, false)
	}
	return req, nil
}

// context is the endpoint's worker's Context, nil for a nil or zero
// Endpoint (whose calls then fail on their own check).
func (ep *Endpoint) context() *Context {
	if ep == nil || ep.w == nil {
		return nil
	}
	return ep.w.ctx
}

// context is the worker's Context, nil for a nil or zero Worker.
func (w *Worker) context() *Context {
	if w == nil || w.engine == nil {
		return nil
	}
	return w.ctx
}
