package ucp

import (
	"context"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucs"
)

// amoSlot is the operand and reply of one atomic operation: two words of
// C memory, which UCX reads and writes until the operation completes (C
// memory needs no pinning, whose cost was most of an atomic's).
type amoSlot struct{ p unsafe.Pointer }

func (s *amoSlot) operand() unsafe.Pointer { return s.p }
func (s *amoSlot) reply() unsafe.Pointer   { return unsafe.Add(s.p, 8) }

// A worker's free slots are its engine's, under the worker's lock (held
// anyway for the UCX call; engine.atomicOp, getSlotLocked, putSlot): slots
// are made in chunks and never freed, as many as atomics were ever in
// flight at once on the worker (a sync.Pool would drop slots, and their C
// memory, at a collection). A slot returns when UCX is done with it: at
// once, or when its operation completes.
const amoChunk = 64 // slots made at once

// amoOp names an atomic for errors.
func amoOp(code uint) string {
	switch code {
	case cgo.AtomicSwap:
		return "ucp: atomic swap"
	case cgo.AtomicCSwap:
		return "ucp: atomic compare-and-swap"
	}
	return "ucp: atomic add"
}

// Add32 adds v to the 4-byte word at off.
func (r RemoteRegion) Add32(off int, v uint32) (Request, error) {
	return r.post(off, 4, uint64(v))
}

// Add64 adds v to the 8-byte word at off.
func (r RemoteRegion) Add64(off int, v uint64) (Request, error) {
	return r.post(off, 8, v)
}

// FetchAdd32 adds v to the 4-byte word at off and returns its old value.
func (r RemoteRegion) FetchAdd32(ctx context.Context, off int, v uint32) (uint32, error) {
	old, err := r.fetch(ctx, cgo.AtomicAdd, off, 4, uint64(v), 0)
	return uint32(old), err
}

// FetchAdd64 adds v to the 8-byte word at off and returns its old value.
func (r RemoteRegion) FetchAdd64(ctx context.Context, off int, v uint64) (uint64, error) {
	return r.fetch(ctx, cgo.AtomicAdd, off, 8, v, 0)
}

// Swap32 stores v in the 4-byte word at off and returns its old value.
func (r RemoteRegion) Swap32(ctx context.Context, off int, v uint32) (uint32, error) {
	old, err := r.fetch(ctx, cgo.AtomicSwap, off, 4, uint64(v), 0)
	return uint32(old), err
}

// Swap64 stores v in the 8-byte word at off and returns its old value.
func (r RemoteRegion) Swap64(ctx context.Context, off int, v uint64) (uint64, error) {
	return r.fetch(ctx, cgo.AtomicSwap, off, 8, v, 0)
}

// CompareAndSwap32 stores new in the 4-byte word at off if it holds old,
// and returns the value it held: the swap happened if and only if that is
// old.
func (r RemoteRegion) CompareAndSwap32(ctx context.Context, off int, old, new uint32) (uint32, error) {
	prev, err := r.fetch(ctx, cgo.AtomicCSwap, off, 4, uint64(old), uint64(new))
	return uint32(prev), err
}

// CompareAndSwap64 stores new in the 8-byte word at off if it holds old,
// and returns the value it held: the swap happened if and only if that is
// old.
func (r RemoteRegion) CompareAndSwap64(ctx context.Context, off int, old, new uint64) (uint64, error) {
	return r.fetch(ctx, cgo.AtomicCSwap, off, 8, old, new)
}

// setWord stores v at p as a size-byte value; word reads one.
func setWord(p unsafe.Pointer, size int, v uint64) {
	if size == 4 {
		*(*uint32)(p) = uint32(v)
		return
	}
	*(*uint64)(p) = v
}

func word(p unsafe.Pointer, size int) uint64 {
	if size == 4 {
		return uint64(*(*uint32)(p))
	}
	return *(*uint64)(p)
}

func (r RemoteRegion) post(off, size int, v uint64) (Request, error) {
	req, _, _, err := r.atomic("ucp: atomic add", cgo.AtomicAdd, off, size, v, 0, false)
	return req, err
}

func (r RemoteRegion) fetch(ctx context.Context, code uint, off, size int, v, swap uint64) (uint64, error) {
	op := amoOp(code)
	req, old, s, err := r.atomic(op, code, off, size, v, swap, true)
	if err != nil || s == nil { // refused, or completed at once (shared memory): old is in
		return old, err
	}
	e := r.key.ep.w.engine
	if err := req.wait(ctx, nil); err != nil {
		if req.Done() { // failed: UCX is done with the slot
			e.putSlot(s)
			return 0, err
		}
		// Given up (ctx ended) in flight: the slot goes back when UCX
		// completes the operation, which the worker then releases.
		req.p.mu.Lock()
		req.p.fl.slot = s
		req.p.mu.Unlock()
		req.Detach()
		return 0, err
	}
	old = word(s.reply(), size)
	e.putSlot(s)
	return old, nil
}

// atomic checks the word and starts the operation with operand v (and
// swap for a compare-and-swap) in a slot of the worker: a post's request
// holds it until it completes, an in-flight fetch hands it to the caller,
// which reads the reply and frees it. One that completes at once
// (completedOK) frees its slot at once, and a fetch's old value is
// returned then.
func (r RemoteRegion) atomic(op string, code uint, off, size int, v, swap uint64, fetch bool) (Request, uint64, *amoSlot, error) {
	if err := r.check(op, off, size); err != nil {
		return Request{}, 0, nil, err
	}
	if addr := r.base + uint64(off); addr&uint64(size-1) != 0 { // size is 4 or 8
		return Request{}, 0, nil, errs.New(op, ucs.ErrInvalidParam, "the %d-byte word at %#x (offset %d) is not aligned to its size", size, addr, off)
	}
	feature, name := FeatureAMO64, "FeatureAMO64"
	if size == 4 {
		feature, name = FeatureAMO32, "FeatureAMO32"
	}
	ep, rkey := r.key.ep, r.key
	if ep.w.ctx.features&feature == 0 {
		return Request{}, 0, nil, errs.New(op, ucs.ErrUnsupported, "the context was made without %s (see WithFeatures)", name)
	}
	if ep.peerErr {
		// UCX's atomic protocols (protocol selection v2, the default from
		// 1.16 to 1.22: src/ucp/rma/amo_sw.c and amo_offload.c) serve no
		// endpoint with peer error handling: 1.18.1 canceled the operation,
		// 1.22.0 aborted the process in its error path (ucp_ep.c:2040).
		return Request{}, 0, nil, errs.New(op, ucs.ErrUnsupported, "UCX performs no atomics on an endpoint with peer error handling: make it with WithPeerErrorHandling(false)")
	}
	if ep.res.Closed() {
		return Request{}, 0, nil, closedError(op)
	}
	// Neither the endpoint nor the key is entered: the worker's lock
	// guards both (engine.atomicOp), which saves two of the three lock
	// pairs an atomic paid for, most of its cost beyond the crossing.
	w := ep.w
	c, old, s, closed, failed := w.atomicOp(&ep.res.State, rkey.res, code, size, v, swap, fetch, r.base+uint64(off))
	switch {
	case closed:
		return Request{}, 0, nil, closedError(op)
	case failed != 0:
		return Request{}, 0, nil, &ucs.Error{Op: op, Err: ucs.Status(failed), Reason: "endpoint failed"}
	case c.P == nil && c.St != 0: // UCX holds nothing of the slot, which is free again
		return Request{}, 0, nil, outcomeError(op, ucs.Status(c.St))
	case c.P == nil:
		return Request{p: completedOK}, old, nil, nil
	}
	req := heldRequest(w, c, op, nil, rkey.res)
	if !fetch {
		req.p.fl.slot, s = s, nil // back to the free slots when UCX is done with it
	} // else the caller reads the reply, then frees the slot
	return req, 0, s, nil
}
