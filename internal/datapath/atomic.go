package datapath

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Atomics on an exporter's memory in rkey mode are served by the
// exporter's data path: the importer's sends an active message (id
// Config.AMAtomic, with AMReply) naming a generation it was granted, an
// offset, an operation and its operands; the exporter's, which takes it
// from its bound endpoint only, performs it with a CPU atomic on its
// mapping of the shared file (so it is atomic with the host's own atomics
// on that memory and with every other importer's) and answers with id
// AMAtomic+1 (with AMReply) carrying the value found. UCX's own atomics
// serve no endpoint with peer error handling, which every data path uses.

// AtomicOp is an atomic operation a data path performs.
type AtomicOp uint8

const (
	AtomicAdd AtomicOp = iota + 1
	AtomicFetchAdd
	AtomicSwap
	AtomicCompareSwap
)

// atomicReqLen and atomicRepLen are the fixed sizes of the two headers:
// request op u8, size u8, 6 zero bytes, seq, gen, off, operand, compare
// (u64 little-endian each); answer seq u64, status i8, 7 zero bytes,
// value u64.
const (
	atomicReqLen = 48
	atomicRepLen = 24
)

type atomicReq struct {
	Op               AtomicOp
	Size             uint8 // 4 or 8
	Seq, Gen, Off    uint64
	Operand, Compare uint64
}

func (r *atomicReq) encode() []byte {
	b := make([]byte, atomicReqLen)
	b[0], b[1] = byte(r.Op), r.Size
	binary.LittleEndian.PutUint64(b[8:], r.Seq)
	binary.LittleEndian.PutUint64(b[16:], r.Gen)
	binary.LittleEndian.PutUint64(b[24:], r.Off)
	binary.LittleEndian.PutUint64(b[32:], r.Operand)
	binary.LittleEndian.PutUint64(b[40:], r.Compare)
	return b
}

// decodeAtomicReq reads a request from a peer: every field is checked
// before use, by the caller against the mapping.
func decodeAtomicReq(b []byte) (atomicReq, bool) {
	if len(b) != atomicReqLen || b[0] < byte(AtomicAdd) || b[0] > byte(AtomicCompareSwap) || (b[1] != 4 && b[1] != 8) {
		return atomicReq{}, false
	}
	for _, z := range b[2:8] {
		if z != 0 {
			return atomicReq{}, false
		}
	}
	return atomicReq{Op: AtomicOp(b[0]), Size: b[1], Seq: binary.LittleEndian.Uint64(b[8:]), Gen: binary.LittleEndian.Uint64(b[16:]),
		Off: binary.LittleEndian.Uint64(b[24:]), Operand: binary.LittleEndian.Uint64(b[32:]), Compare: binary.LittleEndian.Uint64(b[40:])}, true
}

func encodeAtomicRep(seq uint64, st ucs.Status, v uint64) []byte {
	b := make([]byte, atomicRepLen)
	binary.LittleEndian.PutUint64(b, seq)
	b[8] = byte(int8(st))
	binary.LittleEndian.PutUint64(b[16:], v)
	return b
}

func decodeAtomicRep(b []byte) (seq uint64, st ucs.Status, v uint64, ok bool) {
	if len(b) != atomicRepLen {
		return 0, 0, 0, false
	}
	for _, z := range b[9:16] {
		if z != 0 {
			return 0, 0, 0, false
		}
	}
	return binary.LittleEndian.Uint64(b), ucs.Status(int8(b[8])), binary.LittleEndian.Uint64(b[16:]), true
}

// apply performs r on b (a mapping of the shared file), checked: the
// grant writable, the word inside the registered length and aligned.
func (r atomicReq) apply(b []byte, length uint64, writable bool) (uint64, ucs.Status) {
	size := uint64(r.Size)
	switch {
	case !writable:
		return 0, ucs.ErrInvalidParam // granted read-only: the mapping is, too
	case r.Off%size != 0:
		return 0, ucs.ErrInvalidParam
	case r.Off > length || size > length-r.Off || length > uint64(len(b)):
		return 0, ucs.ErrOutOfRange
	}
	p := unsafe.Pointer(&b[r.Off])
	if size == 4 {
		a := (*uint32)(p)
		x, c := uint32(r.Operand), uint32(r.Compare)
		switch r.Op {
		case AtomicAdd, AtomicFetchAdd:
			return uint64(atomic.AddUint32(a, x) - x), ucs.OK
		case AtomicSwap:
			return uint64(atomic.SwapUint32(a, x)), ucs.OK
		default:
			for {
				old := atomic.LoadUint32(a)
				if old != c {
					return uint64(old), ucs.OK
				}
				if atomic.CompareAndSwapUint32(a, c, x) {
					return uint64(c), ucs.OK
				}
			}
		}
	}
	a := (*uint64)(p)
	switch r.Op {
	case AtomicAdd, AtomicFetchAdd:
		return atomic.AddUint64(a, r.Operand) - r.Operand, ucs.OK
	case AtomicSwap:
		return atomic.SwapUint64(a, r.Operand), ucs.OK
	default:
		for {
			old := atomic.LoadUint64(a)
			if old != r.Compare {
				return old, ucs.OK
			}
			if atomic.CompareAndSwapUint64(a, r.Compare, r.Operand) {
				return r.Compare, ucs.OK
			}
		}
	}
}

// onAtomic runs in the exporter's worker's progress: a request from the
// bound endpoint is served at once (a CPU atomic under c.mu, which keeps
// the mapping from being unmapped meanwhile); anything else is ignored.
func (c *child) onAtomic(m *ucp.AMMessage) {
	ep := m.Reply()
	req, ok := decodeAtomicReq(m.Header)
	ok = ok && m.Len() == 0 && !m.IsRendezvous() // a request carries no data
	c.mu.Lock()
	if ep == nil || ep != c.bound || !ok {
		c.mu.Unlock()
		return
	}
	v, st := uint64(0), ucs.ErrNoElem // not granted, or unmapped (revoked)
	if mp := c.maps[req.Gen]; mp != nil {
		v, st = req.apply(mp.b, mp.n, mp.write)
	}
	c.mu.Unlock()
	go func() { // a send waits for the worker, which runs this handler
		r, err := ep.SendAM(ucp.AMID(c.cfg.AMAtomic+1), encodeAtomicRep(req.Seq, st, v), nil, ucp.AMReply)
		if err == nil {
			r.Detach()
		}
	}()
}

// atomicWait is an importer's request waiting for its answer.
type atomicWait chan atomicAnswer

type atomicAnswer struct {
	st ucs.Status
	v  uint64
}

// onAtomicAnswer runs in the importer's worker's progress: an answer from
// the exporter's data path (its endpoint only; a third peer's is ignored)
// goes to its waiter.
func (imp *importer) onAtomicAnswer(m *ucp.AMMessage) {
	seq, st, v, ok := decodeAtomicRep(m.Header)
	ep := m.Reply()
	imp.mu.Lock()
	if !ok || ep == nil || ep != imp.ep {
		imp.mu.Unlock()
		return
	}
	w := imp.atomics[seq]
	delete(imp.atomics, seq)
	imp.mu.Unlock()
	if w != nil {
		w <- atomicAnswer{st, v}
	}
}

// atomic performs the parent's request m on the exporter's memory.
func (imp *importer) atomic(m message) {
	c := imp.c
	fail := func(st ucs.Status, format string, a ...any) {
		c.send(message{Op: "error", Seq: m.Seq, Err: truncate(fmt.Sprintf(format, a...)), Status: int8(st)})
	}
	if m.Atomic == nil || imp.ep == nil {
		fail(ucs.ErrInvalidParam, "an atomic request without its operation, or before the connection")
		return
	}
	req := *m.Atomic
	imp.mu.Lock()
	_, granted := imp.regions[req.Gen]
	imp.nAtomic++
	req.Seq = imp.nAtomic
	w := make(atomicWait, 1)
	if granted {
		imp.atomics[req.Seq] = w
	}
	imp.mu.Unlock()
	if !granted {
		fail(ucs.ErrNoElem, "no generation %d", req.Gen)
		return
	}
	forget := func() {
		imp.mu.Lock()
		delete(imp.atomics, req.Seq)
		imp.mu.Unlock()
	}
	r, err := imp.ep.SendAM(ucp.AMID(c.cfg.AMAtomic), req.encode(), nil, ucp.AMReply)
	if err != nil {
		forget()
		fail(ucs.ErrIOError, "%v", err)
		return
	}
	r.Detach()
	t := time.NewTimer(atomicTimeout)
	defer t.Stop()
	select {
	case a := <-w:
		if a.st != ucs.OK {
			fail(a.st, "the exporter's data path refused the atomic operation (generation %d, %d bytes at %d)", req.Gen, req.Size, req.Off)
			return
		}
		c.send(message{Op: "atomic-done", Seq: m.Seq, Addr: a.v})
	case <-imp.ep.Failed():
		forget()
		fail(ucs.ErrConnectionReset, "the connection to the exporter's data path failed")
	case <-t.C:
		forget()
		fail(ucs.ErrTimedOut, "no answer from the exporter's data path in %v", atomicTimeout)
	}
}

// atomicTimeout bounds the wait for an atomic's answer in the importer's
// data path (its parent's ctx bounds the call).
const atomicTimeout = 30 * time.Second

// Atomic performs op (size 4 or 8 bytes) at off in generation gen of the
// exporter's memory and returns the value found there (an importer's data
// path).
//
// When ctx ends first it returns an error wrapping ucs.ErrTimedOut (or
// ucs.ErrCanceled) at once, and the process goes on: the operation may
// still be performed, as an RDMA atomic whose completion was not awaited.
// settled runs once the request is settled (answered, or the process
// ended): before Atomic returns, or after, when ctx ended first.
func (p *Proc) Atomic(ctx context.Context, gen uint64, op AtomicOp, size int, off int, operand, compare uint64, settled func()) (uint64, error) {
	const name = "atomic"
	if ctx.Err() != nil { // sent nothing: nothing is performed
		settled()
		return 0, errs.Ctx("data path: "+name, ctx.Err(), "the call's ctx had ended: nothing was sent")
	}
	m := message{Op: name, Atomic: &atomicReq{Op: op, Size: uint8(size), Gen: gen, Off: uint64(off), Operand: operand, Compare: compare}}
	ch, forget := p.expect(&m)
	if err := p.send(m, nil); err != nil {
		forget()
		settled()
		return 0, err
	}
	answer := func(r message) (uint64, error) {
		switch r.Op {
		case "atomic-done":
			return r.Addr, nil
		case "error":
			return 0, answerErr(name, r)
		}
		p.kill()
		return 0, fmt.Errorf("data path: a %q answer to %s", r.Op, name)
	}
	select {
	case r := <-ch:
		forget()
		settled()
		return answer(r)
	case <-p.done:
		forget()
		settled()
		return 0, p.Err()
	case <-ctx.Done():
		go func() { // the answer comes, or the process ends: then the request is forgotten
			select {
			case <-ch:
			case <-p.done:
			}
			forget()
			settled()
		}()
		return 0, errs.Ctx("data path: "+name, ctx.Err(), "the call's ctx ended before the answer: the operation may yet be performed")
	}
}
