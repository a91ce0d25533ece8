package ucp

import (
	"context"
	"runtime"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

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
	return pinnedGo(data, func(p unsafe.Pointer, pin *runtime.Pinner) (Request, error) {
		return ep.sendStream(p, len(data), cgo.MemHandle{}, pin, nil)
	})
}

// SendStreamMem sends the range src on the endpoint's stream.
func (ep *Endpoint) SendStreamMem(src MemRange) (Request, error) {
	const op = "ucp: send on stream"
	p, err := src.enter(op, ep.context())
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
	if n == 0 {
		// UCX asserts on an empty stream message that reaches the peer
		// before a receive (stream_recv.c:501, 1.16 to 1.23): it aborts the
		// receiving process.
		return Request{}, errs.New(op, ucs.ErrInvalidParam, "a stream send needs at least one byte (UCX aborts the receiver on an empty one)")
	}
	r := ep.w.streamSend(ep.c, p, n, memh)
	return newRequest(ep.w, r, op, pin, mem), nil
}

// RecvStream receives the stream's next bytes into buf (pinned meanwhile)
// and returns how many: at least one, as many as have arrived up to
// len(buf), all of buf with StreamWaitAll. UCX cancels no stream receive:
// when ctx ends first, the receive stays posted, buf stays pinned and is
// written when bytes come (until the endpoint closes), and the error says
// so; do not reuse buf before then. The receive progresses the worker
// while it waits.
func (ep *Endpoint) RecvStream(ctx context.Context, buf []byte, flags StreamRecvFlags) (int, error) {
	p, pin := pinBytes(buf)
	return ep.recvStream(ctx, p, len(buf), flags, nil, pin)
}

// RecvStreamMem is RecvStream into the range dst of a mapping.
func (ep *Endpoint) RecvStreamMem(ctx context.Context, dst MemRange, flags StreamRecvFlags) (int, error) {
	const op = "ucp: receive on stream"
	p, err := dst.enter(op, ep.context())
	if err != nil {
		return 0, err
	}
	// The mapping is left once the receive holds it (recvStream): a Close
	// of it meanwhile must not wait for the bytes.
	return ep.recvStream(ctx, p, dst.n, flags, dst.m, nil)
}

// recvStream receives into n bytes at p: of m, entered by the caller (left
// here, once the request holds it), or of Go memory pinned by pin.
func (ep *Endpoint) recvStream(ctx context.Context, p unsafe.Pointer, n int, flags StreamRecvFlags, m *Mem, pin *runtime.Pinner) (int, error) {
	const op = "ucp: receive on stream"
	memh, mem := recvMem(m)
	r, length, err := ep.startStreamRecv(op, p, n, flags, memh)
	if err != nil || r.P == nil {
		leaveMem(m)
		if pin != nil {
			unpin(pin)
		}
		if err == nil && r.St != 0 {
			err = outcomeError(op, ucs.Status(r.St))
		}
		if err != nil {
			return 0, err
		}
		return int(length), nil
	}
	w := ep.w
	req := newRequest(w, r, op, pin, mem) // holds the mapping from here
	leaveMem(m)
	ep.res.Exit()
	end := req.waitRecv(ctx, op) // the worker's Close ends it too
	if end != nil && !req.p.fl.c.Done() {
		req.Detach()
		return 0, &ucs.Error{Op: op, Err: end.(*ucs.Error).Err, Wrapped: ctx.Err(),
			Reason: "gave up waiting; UCX cancels no stream receive, so it stays posted: the buffer stays pinned and is written when bytes come, until the endpoint closes"}
	}
	var out recvOutcome
	if err := req.wait(context.Background(), &out); err != nil { // done: settles at once
		return 0, err
	}
	return int(out.n), nil
}

// startStreamRecv posts the receive; for one in flight (r.P set) the
// endpoint stays entered: Exit it once the request holds what it needs.
func (ep *Endpoint) startStreamRecv(op string, p unsafe.Pointer, n int, flags StreamRecvFlags, memh cgo.MemHandle) (cgo.Request, uint64, error) {
	if err := ep.enter(op); err != nil {
		return cgo.Request{}, 0, err
	}
	if err := ep.checkStream(op); err != nil {
		ep.res.Exit()
		return cgo.Request{}, 0, err
	}
	if n == 0 {
		ep.res.Exit()
		return cgo.Request{}, 0, errs.New(op, ucs.ErrInvalidParam, "a stream receive needs a buffer of at least one byte")
	}
	r, length := ep.w.streamRecv(ep.c, p, n, memh, flags&StreamWaitAll != 0)
	if r.P == nil {
		ep.res.Exit()
	}
	return r, length, nil
}
