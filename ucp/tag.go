package ucp

import (
	"runtime"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Tag matching (ucp_tag_send_nbx, ucp_tag_recv_nbx, ucp_tag_probe_nb): a
// message sent on an endpoint with a 64-bit tag is taken by the peer
// worker's receive whose tag it matches under the receive's mask (the bits
// set in mask must be equal), in the order messages were sent from one
// endpoint. A worker's receives take messages from every endpoint of the
// worker, and so from any peer connected to it: the tag says nothing about
// who sent. The context needs FeatureTag (WithFeatures; ucs.ErrUnsupported
// without). A message larger than the receive's buffer fails the receive
// with ucs.ErrTruncated.

// Tag is a tag-matched message's tag.
type Tag uint64

// TagInfo is what a probe saw: a message's tag and length.
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
	p, pin := pinBytes(data)
	req, err := ep.sendTag(tag, p, len(data), cgo.MemHandle{}, pin, nil)
	if err != nil && pin != nil {
		unpin(pin)
	}
	return req, err
}

// SendTagMem sends the range src with tag to the peer.
func (ep *Endpoint) SendTagMem(tag Tag, src MemRange) (Request, error) {
	const op = "ucp: send tagged message"
	p, err := src.enter(op)
	if err != nil {
		return Request{}, err
	}
	defer src.m.res.Exit()
	return ep.sendTag(tag, p, src.n, src.m.res.State.h, nil, &src.m.res)
}

func (ep *Endpoint) sendTag(tag Tag, p unsafe.Pointer, n int, memh cgo.MemHandle, pin *runtime.Pinner, mem handle.Parent) (Request, error) {
	const op = "ucp: send tagged message"
	if err := ep.enter(op); err != nil {
		return Request{}, err
	}
	defer ep.res.Exit()
	if err := ep.w.checkTag(op); err != nil {
		return Request{}, err
	}
	ep.w.mu.Lock()
	r := ep.c.TagSend(uint64(tag), p, uintptr(n), memh)
	ep.w.mu.Unlock()
	return newRequest(ep.w, r, op, pin, mem), nil
}

// RecvTag posts a receive of the next message whose tag matches tag under
// mask into buf, pinned until the request completes: Wait for it, then
// its Length and Tag say what it took. A receive whose Wait gave up (ctx
// ended) stays posted and takes the next matching message into buf: Cancel
// it first (then Wait for its outcome) before reusing buf.
func (w *Worker) RecvTag(buf []byte, tag, mask Tag) (Request, error) {
	p, pin := pinBytes(buf)
	req, err := w.recvTag(p, len(buf), tag, mask, cgo.MemHandle{}, pin, nil)
	if err != nil && pin != nil {
		unpin(pin)
	}
	return req, err
}

// RecvTagMem is RecvTag into the range dst of a mapping.
func (w *Worker) RecvTagMem(dst MemRange, tag, mask Tag) (Request, error) {
	const op = "ucp: receive tagged message"
	p, err := dst.enter(op)
	if err != nil {
		return Request{}, err
	}
	defer dst.m.res.Exit()
	return w.recvTag(p, dst.n, tag, mask, dst.m.res.State.h, nil, &dst.m.res)
}

func (w *Worker) recvTag(p unsafe.Pointer, n int, tag, mask Tag, memh cgo.MemHandle, pin *runtime.Pinner, mem handle.Parent) (Request, error) {
	const op = "ucp: receive tagged message"
	if !w.enter() {
		return Request{}, closedError(op)
	}
	defer w.res.Exit()
	if err := w.checkTag(op); err != nil {
		return Request{}, err
	}
	w.mu.Lock()
	r, length, sender := w.c.TagRecv(p, uintptr(n), uint64(tag), uint64(mask), memh)
	w.mu.Unlock()
	if r.P == nil && r.St == 0 {
		if pin != nil {
			unpin(pin)
		}
		return completedRecv(op, length, sender), nil
	}
	return newRequest(w, r, op, pin, mem), nil
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
	w.mu.Lock()
	ok, length, sender := w.c.TagProbe(uint64(tag), uint64(mask))
	w.mu.Unlock()
	if !ok {
		return TagInfo{}, false, nil
	}
	return TagInfo{Tag: Tag(sender), Len: int(length)}, true, nil
}
