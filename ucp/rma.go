package ucp

import (
	"github.com/ucxgo/ucx/internal/errs"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// The data path. Operations from mapped memory (PutMem, GetMem, SendAMMem)
// pass the mapping's memh to UCX (UCP_OP_ATTR_FIELD_MEMH, the only way to
// use imported memory locally) and allocate nothing; the []byte forms pin
// the slice for the life of the operation.

// PutMem writes n bytes of src at off to remote address raddr.
func (ep *Endpoint) PutMem(src *Mem, off, n int, raddr uint64, rkey *RemoteKey) (Request, error) {
	return ep.rmaMem("ucp: put", true, src, off, n, raddr, rkey)
}

// GetMem reads n bytes at remote address raddr into dst at off.
func (ep *Endpoint) GetMem(dst *Mem, off, n int, raddr uint64, rkey *RemoteKey) (Request, error) {
	return ep.rmaMem("ucp: get", false, dst, off, n, raddr, rkey)
}

// Put writes b to remote address raddr; b is pinned until the request
// completes and must not change before it does.
func (ep *Endpoint) Put(b []byte, raddr uint64, rkey *RemoteKey) (Request, error) {
	return ep.rmaBytes("ucp: put", true, b, raddr, rkey)
}

// Get reads len(b) bytes at remote address raddr into b, pinned until the
// request completes.
func (ep *Endpoint) Get(b []byte, raddr uint64, rkey *RemoteKey) (Request, error) {
	return ep.rmaBytes("ucp: get", false, b, raddr, rkey)
}

func (ep *Endpoint) rmaMem(op string, put bool, m *Mem, off, n int, raddr uint64, rkey *RemoteKey) (Request, error) {
	if err := m.enter(op); err != nil {
		return Request{}, err
	}
	defer m.res.Exit()
	p, err := m.span(op, off, n)
	if err != nil {
		return Request{}, err
	}
	return ep.rma(op, put, p, n, m.res.State.h, raddr, rkey, nil, &m.res)
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

func (ep *Endpoint) rmaBytes(op string, put bool, b []byte, raddr uint64, rkey *RemoteKey) (Request, error) {
	p, pin := pinBytes(b)
	req, err := ep.rma(op, put, p, len(b), cgo.MemHandle{}, raddr, rkey, pin, nil)
	if err != nil && pin != nil {
		unpin(pin)
	}
	return req, err
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
	ep.w.mu.Lock()
	var r cgo.Request
	if put {
		r = ep.c.Put(p, uintptr(n), memh, raddr, rkey.res.State.c)
	} else {
		r = ep.c.Get(p, uintptr(n), memh, raddr, rkey.res.State.c)
	}
	ep.w.mu.Unlock()
	req := newRequest(ep.w, r, op, pin, mem, rkey.res)
	if !put && r.P != nil {
		fl := &req.p.fl
		fl.gets = ep.res.State.gets
		fl.gets.add(r)
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
	p, pin := pinBytes(data)
	req, err := ep.sendAM(id, header, p, len(data), cgo.MemHandle{}, flags, pin, nil)
	if err != nil && pin != nil {
		unpin(pin)
	}
	return req, err
}

// SendAMMem sends an active message whose data is n bytes of m at off.
func (ep *Endpoint) SendAMMem(id AMID, header []byte, m *Mem, off, n int, flags AMSendFlags) (Request, error) {
	const op = "ucp: send active message"
	if err := m.enter(op); err != nil {
		return Request{}, err
	}
	defer m.res.Exit()
	p, err := m.span(op, off, n)
	if err != nil {
		return Request{}, err
	}
	return ep.sendAM(id, header, p, n, m.res.State.h, flags, nil, &m.res)
}

func (ep *Endpoint) sendAM(id AMID, header []byte, p unsafe.Pointer, n int, memh cgo.MemHandle, flags AMSendFlags, pin *runtime.Pinner, mem handle.Parent) (Request, error) {
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
	ep.w.mu.Lock()
	// The header goes to C from the worker's own buffer: the caller's may
	// lie in a value that holds Go pointers (a field of a struct, say),
	// which the cgo pointer rules forbid passing, and UCX copies it before
	// ucp_am_send_nbx returns.
	ep.w.amHeader = append(ep.w.amHeader[:0], header...)
	r := ep.c.AMSend(uint(id), ep.w.amHeader, p, uintptr(n), memh, uint(flags))
	ep.w.mu.Unlock()
	return newRequest(ep.w, r, op, pin, mem), nil
}
