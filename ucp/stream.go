package ucp

import (
	"runtime"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Streams (ucp_stream_send_nbx, ucp_stream_recv_nbx): an endpoint's bytes
// in order, without message boundaries, as a TCP connection's. The context
// needs FeatureStream (WithFeatures; ucs.ErrUnsupported without).

// StreamRecvFlags modify RecvStream.
type StreamRecvFlags uint

// StreamWaitAll completes a stream receive only once the whole buffer is
// filled (or the endpoint fails).
const StreamWaitAll StreamRecvFlags = 1

func (ep *Endpoint) checkStream(op string) error {
	if ep.w.ctx.features&FeatureStream == 0 {
		return errs.New(op, ucs.ErrUnsupported, "the context was made without FeatureStream (see WithFeatures)")
	}
	return nil
}

// SendStream sends data on the endpoint's stream; data is pinned until the
// request completes and must not change before it does.
func (ep *Endpoint) SendStream(data []byte) (Request, error) {
	p, pin := pinBytes(data)
	req, err := ep.sendStream(p, len(data), cgo.MemHandle{}, pin, nil)
	if err != nil && pin != nil {
		unpin(pin)
	}
	return req, err
}

// SendStreamMem sends the range src on the endpoint's stream.
func (ep *Endpoint) SendStreamMem(src MemRange) (Request, error) {
	const op = "ucp: send on stream"
	p, err := src.enter(op)
	if err != nil {
		return Request{}, err
	}
	defer src.m.res.Exit()
	return ep.sendStream(p, src.n, src.m.res.State.h, nil, &src.m.res)
}

func (ep *Endpoint) sendStream(p unsafe.Pointer, n int, memh cgo.MemHandle, pin *runtime.Pinner, mem handle.Parent) (Request, error) {
	const op = "ucp: send on stream"
	if err := ep.enter(op); err != nil {
		return Request{}, err
	}
	defer ep.res.Exit()
	if err := ep.checkStream(op); err != nil {
		return Request{}, err
	}
	ep.w.mu.Lock()
	r := ep.c.StreamSend(p, uintptr(n), memh)
	ep.w.mu.Unlock()
	return newRequest(ep.w, r, op, pin, mem), nil
}

// RecvStream receives the stream's next bytes into buf, pinned until the
// request completes: at least one byte, as many as have arrived up to
// len(buf) (all of buf with StreamWaitAll); its Length says how many. A
// receive whose Wait gave up stays posted (UCX cancels no stream receive)
// and fills buf when bytes come, until the endpoint is closed: do not
// reuse buf before then.
func (ep *Endpoint) RecvStream(buf []byte, flags StreamRecvFlags) (Request, error) {
	p, pin := pinBytes(buf)
	req, err := ep.recvStream(p, len(buf), flags, cgo.MemHandle{}, pin, nil)
	if err != nil && pin != nil {
		unpin(pin)
	}
	return req, err
}

// RecvStreamMem is RecvStream into the range dst of a mapping.
func (ep *Endpoint) RecvStreamMem(dst MemRange, flags StreamRecvFlags) (Request, error) {
	const op = "ucp: receive on stream"
	p, err := dst.enter(op)
	if err != nil {
		return Request{}, err
	}
	defer dst.m.res.Exit()
	return ep.recvStream(p, dst.n, flags, dst.m.res.State.h, nil, &dst.m.res)
}

func (ep *Endpoint) recvStream(p unsafe.Pointer, n int, flags StreamRecvFlags, memh cgo.MemHandle, pin *runtime.Pinner, mem handle.Parent) (Request, error) {
	const op = "ucp: receive on stream"
	if err := ep.enter(op); err != nil {
		return Request{}, err
	}
	defer ep.res.Exit()
	if err := ep.checkStream(op); err != nil {
		return Request{}, err
	}
	if n == 0 {
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "a stream receive needs a buffer of at least one byte")
	}
	ep.w.mu.Lock()
	r, length := ep.c.StreamRecv(p, uintptr(n), memh, flags&StreamWaitAll != 0)
	ep.w.mu.Unlock()
	if r.P == nil && r.St == 0 {
		if pin != nil {
			unpin(pin)
		}
		return completedRecv(op, length, 0), nil
	}
	return newRequest(ep.w, r, op, pin, mem), nil
}
