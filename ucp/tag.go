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

// Tag is a tag-matched message's tag (see the package doc, "Tag matching").
type Tag uint64

// TagInfo is a message's tag and length: what RecvTag took, or what
// ProbeTag saw.
type TagInfo struct {
	Tag Tag
	Len int
}

func (w *Worker) checkTag(op string) error {
	if w.ctx.features&FeatureTag == 0 {
		return errs.New(op, ucs.ErrUnsupported, "the context was made without FeatureTag (see WithFeatures)")
	}
	return nil
}

// SendTag sends data with tag to the peer; data is pinned until the
// request completes and must not change before it does.
func (ep *Endpoint) SendTag(tag Tag, data []byte) (Request, error) {
	return sendGo(data, func(p unsafe.Pointer, pin *runtime.Pinner, imm bool) (Request, error) {
		return ep.sendTag(tag, p, len(data), cgo.MemHandle{}, pin, nil, imm)
	})
}

// SendTagMem sends the range src with tag to the peer.
func (ep *Endpoint) SendTagMem(tag Tag, src MemRange) (Request, error) {
	const op = "ucp: send tagged message"
	p, err := src.enter(op, ep.context())
	if err != nil {
		return Request{}, err
	}
	defer src.m.res.Exit()
	return ep.sendTag(tag, p, src.n, src.m.res.State.h, nil, &src.m.res, false)
}

func (ep *Endpoint) sendTag(tag Tag, p unsafe.Pointer, n int, memh cgo.MemHandle, pin *runtime.Pinner, mem handle.Parent, imm bool) (Request, error) {
	const op = "ucp: send tagged message"
	if err := ep.enter(op); err != nil {
		return Request{}, err
	}
	defer ep.res.Exit()
	if err := ep.w.checkTag(op); err != nil {
		return Request{}, err
	}
	r := ep.w.tagSend(ep.c, tag, p, n, memh, imm)
	if refusedImmediate(imm, r, p, &pin) {
		return Request{}, errNotImmediate
	}
	return newRequest(ep.w, r, op, pin, mem), nil
}

// RecvTag receives the next message whose tag matches tag under mask into
// buf and returns its tag and length. A buf of up to 1 KiB is received
// into the worker's own memory and copied, and is never written after
// RecvTag returns; a longer one is pinned meanwhile. When ctx ends first
// the receive is cancelled and buf is the caller's again, except that a
// message matched meanwhile is still returned, without error; one still
// arriving after a further second (a large message UCX is fetching) is
// left to the worker, a long buf pinned until it lands, and the error
// says so. The receive progresses the worker while it waits.
func (w *Worker) RecvTag(ctx context.Context, buf []byte, tag, mask Tag) (TagInfo, error) {
	if n := len(buf); n > 0 && n <= landingSize {
		return w.recvTag(ctx, nil, n, tag, mask, nil, nil, buf)
	}
	p, pin := pinBytes(buf)
	return w.recvTag(ctx, p, len(buf), tag, mask, nil, pin, nil)
}

// landingSize is the longest buffer a tag receive lands in a slab of its
// worker's C memory first (engine.tagRecv), made landingChunk at a time:
// pinning the caller's buffer instead (a runtime record set and cleared,
// and the pinners' lock) cost more than half of an 8-byte ping-pong's
// round trip on shared memory.
const (
	landingSize  = 1024
	landingChunk = 16
)

// RecvTagMem is RecvTag into the range dst of a mapping.
func (w *Worker) RecvTagMem(ctx context.Context, dst MemRange, tag, mask Tag) (TagInfo, error) {
	const op = "ucp: receive tagged message"
	p, err := dst.enter(op, w.context())
	if err != nil {
		return TagInfo{}, err
	}
	// The mapping is left once the receive holds it (recvTag): a Close of
	// it meanwhile must not wait for the message.
	return w.recvTag(ctx, p, dst.n, tag, mask, dst.m, nil, nil)
}

// recvTag receives into n bytes at p: of m, entered by the caller (left
// here, once the request holds it), or of Go memory pinned by pin; or,
// with land (p nil), into a landing slab copied into land.
func (w *Worker) recvTag(ctx context.Context, p unsafe.Pointer, n int, tag, mask Tag, m *Mem, pin *runtime.Pinner, land []byte) (TagInfo, error) {
	const op = "ucp: receive tagged message"
	memh, mem := recvMem(m)
	if err := w.startTagRecv(op); err != nil {
		leaveMem(m)
		if pin != nil {
			unpin(pin)
		}
		return TagInfo{}, err
	}
	r, length, sender, slab := w.tagRecv(p, n, tag, mask, memh, land)
	if r.P == nil { // completed at once: the message was waiting (copied into land)
		leaveMem(m)
		w.res.Exit()
		if pin != nil {
			unpin(pin)
		}
		if r.St != 0 {
			return TagInfo{}, outcomeError(op, ucs.Status(r.St))
		}
		return TagInfo{Tag: Tag(sender), Len: int(length)}, nil
	}
	req := newRequest(w, r, op, pin, mem) // holds the mapping from here
	if slab != nil {
		req.p.fl.landing, req.p.landTo = slab, land
	}
	leaveMem(m)
	w.res.Exit()
	end := req.waitRecv(ctx, op)
	var out recvOutcome
	if end != nil && !req.p.fl.c.Done() {
		req.cancel()
		grace, cancel := context.WithTimeout(context.Background(), forceCloseGrace)
		err := req.wait(grace, &out)
		cancel()
		e := &ucs.Error{Op: op, Err: end.(*ucs.Error).Err, Wrapped: ctx.Err()}
		switch {
		case err == nil: // matched before the cancel: taken
			return TagInfo{Tag: Tag(out.tag), Len: int(out.n)}, nil
		case req.Done(): // cancelled
			e.Reason = "gave up waiting; the receive was cancelled, and the buffer is the caller's again"
			if e.Err == ucs.ErrClosed {
				e.Reason = "the worker was closed; the receive was cancelled, and the buffer is the caller's again"
			}
		default:
			req.Detach()
			e.Reason = "gave up waiting; a message was matched and is still arriving: the buffer stays pinned and is written until it lands"
			if land != nil {
				e.Reason = "gave up waiting; a message was matched and is still arriving, and is dropped when it lands: the buffer is the caller's again"
			}
		}
		return TagInfo{}, e
	}
	if err := req.wait(context.Background(), &out); err != nil { // done: settles at once
		return TagInfo{}, err
	}
	return TagInfo{Tag: Tag(out.tag), Len: int(out.n)}, nil
}

// startTagRecv enters the worker for a receive: Exit it when the receive
// is started.
func (w *Worker) startTagRecv(op string) error {
	if !w.enter() {
		return closedError(op)
	}
	if err := w.checkTag(op); err != nil {
		w.res.Exit()
		return err
	}
	return nil
}

// ProbeTag reports whether a message whose tag matches tag under mask has
// arrived and not been received, and its tag and length; it takes nothing
// (RecvTag does), and progresses nothing: a message arrives while the
// worker is progressed.
func (w *Worker) ProbeTag(tag, mask Tag) (TagInfo, bool, error) {
	const op = "ucp: probe tagged message"
	if !w.enter() {
		return TagInfo{}, false, closedError(op)
	}
	defer w.res.Exit()
	if err := w.checkTag(op); err != nil {
		return TagInfo{}, false, err
	}
	ok, length, sender := w.tagProbe(tag, mask)
	if !ok {
		return TagInfo{}, false, nil
	}
	return TagInfo{Tag: Tag(sender), Len: int(length)}, true, nil
}
