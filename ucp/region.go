package ucp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"weak"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucs"
)

// RemoteRegion is length bytes of a peer's memory at a base address,
// reached through a remote key on the endpoint the key was unpacked on: the
// address, length and key a peer sends travel together, and offsets are
// checked against the length before anything reaches UCX. It is a value:
// copy it, slice it with Sub; closing its key ends it.
//
// ReadAt and WriteAt make it an io.ReaderAt and io.WriterAt for the common
// case: they copy through a buffer of their own (one allocation and copy
// per call; the Request forms move bytes in place) and wait without a
// deadline (the io interfaces take no context), so where the peer may
// stall use ReadAtContext or WriteAtContext.
type RemoteRegion struct {
	key   *RemoteKey
	base  uint64
	n     int
	local *Mem // a LocalRegion's mapping: closed, it ends the region too
}

// Region is the length bytes at base (the peer's address, e.g. its
// Mem.Address) that the key gives access to. For a key from UnpackRegion
// a range outside the peer's mapping is refused (ucs.ErrOutOfRange); a key
// from UnpackRemoteKey carries no bounds (UCX keys have no length), so
// there base and length are the caller's word, and a region past the
// peer's mapping reaches whatever lies beyond it: over tcp the peer's UCX
// serves it (it reads or writes other memory, or crashes), over shared
// memory this process does the access itself, and may crash (SIGSEGV for
// puts and atomics, an abort in process_vm_readv for gets).
// Send a region with Mem.PackRegion where you can, and never take a base
// and length from a peer you do not trust.
func (rk *RemoteKey) Region(base uint64, length int) (RemoteRegion, error) {
	const op = "ucp: remote region"
	if rk == nil || rk.res.Closed() {
		return RemoteRegion{}, closedError(op)
	}
	if rk.bounded {
		if err := rk.checkBounds(op, base, length); err != nil {
			return RemoteRegion{}, err
		}
	} else if length < 0 || base+uint64(length) < base {
		return RemoteRegion{}, errs.New(op, ucs.ErrInvalidParam, "%d bytes at %#x do not form a region", length, base)
	}
	return RemoteRegion{key: rk, base: base, n: length}, nil
}

// checkBounds refuses, for a key from UnpackRegion, length bytes at base
// outside the peer's mapping.
func (rk *RemoteKey) checkBounds(op string, base uint64, length int) error {
	if !rk.bounded {
		return nil
	}
	if length < 0 || base < rk.base || base-rk.base > uint64(rk.n) || uint64(length) > uint64(rk.n)-(base-rk.base) {
		return errs.New(op, ucs.ErrOutOfRange, "%d bytes at %#x are outside the peer's %d-byte mapping at %#x", length, base, rk.n, rk.base)
	}
	return nil
}

// Key is the remote key the region is reached through: close it when done
// with the region (and every region sliced from it).
func (r RemoteRegion) Key() *RemoteKey { return r.key }

// The packed region of Mem.PackRegion: a magic, the mapping's address and
// length (u64 each, little endian), its packed remote key, and a CRC-32C
// of all that. The checksum catches damage in transit: a damaged length
// would make a region past the mapping (the peer's UCX then serves other
// memory, or crashes), and a damaged key can move its parts onto other
// readers in ways no format check sees (a changed MD map crashed UCX's
// posix reader).
const (
	regionMagic      = "UCXr"
	regionBounds     = 16 // the mapping's address and length
	regionHeaderSize = len(regionMagic) + regionBounds
)

// The binding's sealed formats (packed regions, worker addresses): a
// 4-byte magic, a body, and a CRC-32C (Castagnoli) of magic and body.
const sealSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seal appends the CRC-32C of b.
func seal(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// unseal checks that b is magic, at least minBody bytes of body and its
// CRC-32C, and returns the body; errors name the format (noun) and its
// packer (from).
func unseal(op, magic, noun, from string, b []byte, minBody int) ([]byte, error) {
	if len(b) < len(magic)+minBody+sealSize || string(b[:len(magic)]) != magic {
		return nil, errs.New(op, ucs.ErrInvalidParam, "%d bytes are not a %s (%s)", len(b), noun, from)
	}
	sealed, sum := b[:len(b)-sealSize], binary.LittleEndian.Uint32(b[len(b)-sealSize:])
	if crc32.Checksum(sealed, castagnoli) != sum {
		return nil, errs.New(op, ucs.ErrInvalidParam, "checksum mismatch: the %s was damaged", noun)
	}
	return sealed[len(magic):], nil
}

// PackRegion packs the mapping's address, length and remote key, which
// travel together, for the peer's Endpoint.UnpackRegion: the peer then
// cannot name a range outside the mapping by mistake, and damaged bytes
// are refused before any reaches UCX. It does not make a peer honest: a
// peer may still craft any region for a key it holds (see RemoteKey.Region).
func (m *Mem) PackRegion() ([]byte, error) {
	if m == nil {
		return nil, closedError("ucp: pack region")
	}
	b := make([]byte, regionHeaderSize, regionHeaderSize+int(max(m.rkeyLen.Load(), 64))+sealSize)
	copy(b, regionMagic)
	binary.LittleEndian.PutUint64(b[len(regionMagic):], m.Address())
	binary.LittleEndian.PutUint64(b[len(regionMagic)+8:], uint64(m.Len()))
	b, err := m.AppendRemoteKey(b)
	if err != nil {
		return nil, err
	}
	return seal(b), nil
}

// UnpackRegion unpacks a region packed by the peer's Mem.PackRegion on
// this endpoint (as UnpackRemoteKey does its key) and returns the whole
// mapping as a region; its key refuses regions outside the mapping. Close
// the region's Key when done.
func (ep *Endpoint) UnpackRegion(ctx context.Context, packed []byte) (RemoteRegion, error) {
	const op = "ucp: unpack region"
	body, err := unseal(op, regionMagic, "packed region", "Mem.PackRegion", packed, regionBounds)
	if err != nil {
		return RemoteRegion{}, err
	}
	base := binary.LittleEndian.Uint64(body)
	n := binary.LittleEndian.Uint64(body[8:])
	if n > math.MaxInt || base+n < base {
		return RemoteRegion{}, errs.New(op, ucs.ErrInvalidParam, "%d bytes at %#x do not form a region", n, base)
	}
	rk, err := ep.UnpackRemoteKey(ctx, body[regionBounds:])
	if err != nil {
		return RemoteRegion{}, asOp(op, err)
	}
	rk.bounded, rk.base, rk.n = true, base, int(n)
	return RemoteRegion{key: rk, base: base, n: int(n)}, nil
}

// Address is the region's first byte in the peer's address space (as the
// peer's Mem.Address names it).
func (r RemoteRegion) Address() uint64 { return r.base }

// Len is the region's length.
func (r RemoteRegion) Len() int { return r.n }

// Sub is the n bytes of r at off.
func (r RemoteRegion) Sub(off, n int) (RemoteRegion, error) {
	if err := r.check("ucp: remote region", off, n); err != nil {
		return RemoteRegion{}, err
	}
	return RemoteRegion{r.key, r.base + uint64(off), n, r.local}, nil
}

func (r RemoteRegion) check(op string, off, n int) error {
	if r.key == nil {
		return errs.New(op, ucs.ErrInvalidParam, "the zero RemoteRegion: make one with RemoteKey.Region")
	}
	if r.key.res.Closed() || r.local != nil && r.local.res.Closed() { // before the bounds: a closed key's empty region is not at its end
		return closedError(op)
	}
	if off < 0 || n < 0 || off > r.n || n > r.n-off {
		return errs.New(op, ucs.ErrOutOfRange, "%d bytes at offset %d do not fit the %d-byte remote region", n, off, r.n)
	}
	return nil
}

// Put writes b at off into the region; b is pinned until the request
// completes and must not change before it does.
func (r RemoteRegion) Put(b []byte, off int) (Request, error) {
	if err := r.check("ucp: put", off, len(b)); err != nil {
		return Request{}, err
	}
	return r.key.ep.rmaBytes("ucp: put", true, b, r.base+uint64(off), r.key)
}

// Get reads len(b) bytes at off of the region into b.
func (r RemoteRegion) Get(b []byte, off int) (Request, error) {
	if err := r.check("ucp: get", off, len(b)); err != nil {
		return Request{}, err
	}
	return r.key.ep.rmaBytes("ucp: get", false, b, r.base+uint64(off), r.key)
}

// PutMem writes the range src to off in the region.
func (r RemoteRegion) PutMem(src MemRange, off int) (Request, error) {
	if err := r.check("ucp: put", off, src.n); err != nil {
		return Request{}, err
	}
	return r.key.ep.rmaMem("ucp: put", true, src, r.base+uint64(off), r.key)
}

// GetMem reads dst.Len() bytes at off in the region into the range dst.
func (r RemoteRegion) GetMem(dst MemRange, off int) (Request, error) {
	if err := r.check("ucp: get", off, dst.n); err != nil {
		return Request{}, err
	}
	return r.key.ep.rmaMem("ucp: get", false, dst, r.base+uint64(off), r.key)
}

// ReadAt reads len(p) bytes at off (io.ReaderAt): fewer, with io.EOF, where
// the region ends first. It waits without a deadline.
func (r RemoteRegion) ReadAt(p []byte, off int64) (int, error) {
	return r.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt bounded by ctx.
func (r RemoteRegion) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := r.check("ucp: get", 0, 0); err != nil {
		return 0, err
	}
	if off >= 0 && off <= int64(r.n) && int64(len(p)) > int64(r.n)-off {
		n, err := r.ReadAtContext(ctx, p[:int64(r.n)-off], off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	if off < 0 || off > int64(r.n) {
		return 0, errs.New("ucp: get", ucs.ErrOutOfRange, "offset %d is outside the %d-byte remote region", off, r.n)
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Into a buffer of its own: a get given up when ctx ends may still land,
	// and io.ReaderAt callers reuse p once ReadAt returns.
	buf := make([]byte, len(p))
	req, err := r.Get(buf, int(off))
	if err != nil {
		return 0, err
	}
	if err := req.Wait(ctx); err != nil {
		req.Detach()
		return 0, err
	}
	return copy(p, buf), nil
}

// WriteAt writes p at off (io.WriterAt) and returns once the bytes are in
// the peer's memory (the endpoint is flushed). A write that does not fit
// the region writes nothing. It waits without a deadline.
func (r RemoteRegion) WriteAt(p []byte, off int64) (int, error) {
	return r.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext is WriteAt bounded by ctx.
func (r RemoteRegion) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := r.check("ucp: put", 0, 0); err != nil {
		return 0, err
	}
	if off < 0 || off > int64(r.n) {
		return 0, errs.New("ucp: put", ucs.ErrOutOfRange, "offset %d is outside the %d-byte remote region", off, r.n)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		// A done ctx starts nothing: a put started now would still land.
		return 0, ctxError("ucp: put", err)
	}
	// From a copy: a put given up when ctx ends may still read its buffer,
	// and io.WriterAt callers reuse p once WriteAt returns.
	req, err := r.Put(bytes.Clone(p), int(off))
	if err != nil {
		return 0, err
	}
	if err := req.Wait(ctx); err != nil {
		req.Detach()
		return 0, err
	}
	// A completed put is only locally complete: the flush makes it remote.
	if err := r.Flush(ctx); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush waits until every operation started on the region's endpoint is
// complete in the peer's memory.
func (r RemoteRegion) Flush(ctx context.Context) error {
	if err := r.check("ucp: flush endpoint", 0, 0); err != nil {
		return err
	}
	return r.key.ep.Flush(ctx)
}

var (
	_ io.ReaderAt = RemoteRegion{}
	_ io.WriterAt = RemoteRegion{}
)

// LocalRegion is a mapping of this process reached as a RemoteRegion
// through the worker's loopback endpoint (an endpoint to itself, made with
// the worker's first LocalRegion and shared by all of them; it is closed a
// second after the last of them closes, or with the worker). It is how
// bytes move between an imported mapping (the exporter's memory, which has
// no Bytes) and local memory: PutMem and GetMem with a local mapping, or
// ReadAt and WriteAt with Go memory.
//
// Its key never leaves this process, so the mapping does not count as
// handed out (see Mem.Close): once the region is closed, the mapping's
// Close unmaps it at once, and the range can be mapped or imported again.
// Either may be closed first. After the mapping's Close the region's
// operations return an error wrapping ucs.ErrClosed, and the mapping stays
// mapped until the region's Close has completed what was started through
// it. After the worker's Close the worker makes no new regions; open ones
// still work and close as before. A region dropped without Close (with
// every copy of its RemoteRegion) is ended by the garbage collector, which
// cannot know that nothing is in flight: its mapping then goes to the
// context's unmap quarantine, as a mapping whose key was handed out.
type LocalRegion struct {
	RemoteRegion
	hold    *localHold      // what Close gives back
	cleanup runtime.Cleanup // of the key: the region dropped unclosed
}

// loopbackLinger is how long a worker keeps its loopback endpoint once its
// last LocalRegion is closed, for the next one: a region that made a new
// endpoint cost 0.3 to 1 ms, one on a live endpoint 20 to 130 µs (UCX 1.18.1
// and 1.22.0, docs/localregion.md).
const loopbackLinger = time.Second

// loopback is a worker's endpoint to itself, shared by its LocalRegions.
// The Worker points at it weakly; its regions, and its linger timer once
// they are closed, hold it. Fields other than w and ep are under the
// worker's loopMu.
type loopback struct {
	w       *Worker
	ep      *Endpoint
	regions int         // open (not closed, not collected) LocalRegions on it
	linger  *time.Timer // running while no region is open (made by the first to arm it)
	closed  bool        // its endpoint was closed: the next region makes another
}

// localHold is what a LocalRegion holds and its Close gives back: a place
// on the loopback, and a reference on the mapping, which keeps it mapped
// (though closed) until the region is done. It is also the argument of the
// cleanup of a region dropped without Close, so it must not point at the
// region or its key.
type localHold struct {
	done atomic.Bool // Close or the cleanup ran
	lb   *loopback
	m    *Mem
}

// LocalRegion makes m (allocated, registered or imported) reachable for
// RMA from this worker; ctx bounds the unpack of its key. Close it when
// done.
func (w *Worker) LocalRegion(ctx context.Context, m *Mem) (*LocalRegion, error) {
	const op = "ucp: local region"
	if m == nil {
		return nil, errs.New(op, ucs.ErrInvalidParam, "nil memory mapping")
	}
	if err := m.enter(op); err != nil {
		return nil, err
	}
	m.res.Ref() // the region's: released by its Close (localHold.give)
	m.res.Exit()
	lb, err := w.joinLoopback(op)
	if err != nil {
		m.res.Release()
		return nil, err
	}
	h := &localHold{lb: lb, m: m}
	// A key that stays in this process: it does not mark the mapping as
	// handed out.
	packed, err := m.appendRemoteKey(nil, false)
	if err != nil {
		h.give(nil, true) // no key was made: nothing can be in flight
		return nil, asOp(op, err)
	}
	key, err := lb.ep.UnpackRemoteKey(ctx, packed)
	if err != nil {
		h.give(nil, true)
		return nil, asOp(op, err)
	}
	lr := &LocalRegion{RemoteRegion: RemoteRegion{key, m.Address(), m.Len(), m}, hold: h}
	// On the key, not the LocalRegion: every copy of the region holds it.
	lr.cleanup = runtime.AddCleanup(key, dropLocalHold, h)
	return lr, nil
}

// joinLoopback is the worker's loopback, made if it has none, with a place
// taken for one more region.
func (w *Worker) joinLoopback(op string) (*loopback, error) {
	if !w.enter() {
		return nil, closedError(op)
	}
	defer w.res.Exit()
	w.loopMu.Lock()
	defer w.loopMu.Unlock()
	if w.loopDone {
		return nil, closedError(op)
	}
	lb := w.loop.Value()
	if lb == nil || lb.closed {
		addr, err := w.PackAddress()
		if err != nil {
			return nil, asOp(op, err)
		}
		// No peer error handling: the peer is this worker, and without it
		// UCX may use its self and shared-memory transports.
		ep, err := w.ConnectWorker(addr, WithPeerErrorHandling(false))
		if err != nil {
			return nil, asOp(op, err)
		}
		lb = &loopback{w: w, ep: ep}
		w.loop = weak.Make(lb)
	}
	if lb.linger != nil {
		lb.linger.Stop()
	}
	lb.regions++
	return lb, nil
}

// leave gives a region's place back. The last region out arms the linger
// timer, or on a closed worker closes the endpoint: with ctx, or handed to
// the worker when ctx is nil (a cleanup, which must not block).
func (lb *loopback) leave(ctx context.Context) error {
	w := lb.w
	w.loopMu.Lock()
	lb.regions--
	if lb.regions > 0 || lb.closed {
		w.loopMu.Unlock()
		return nil
	}
	if !w.loopDone {
		if lb.linger == nil {
			lb.linger = time.AfterFunc(loopbackLinger, lb.expire)
		} else {
			lb.linger.Reset(loopbackLinger)
		}
		w.loopMu.Unlock()
		return nil
	}
	lb.closed = true
	w.loopMu.Unlock()
	if ctx == nil {
		lb.handOff()
		return nil
	}
	return lb.ep.Close(ctx, CloseFlush)
}

// expire closes a loopback whose linger ran out with no region back.
func (lb *loopback) expire() {
	w := lb.w
	w.loopMu.Lock()
	if lb.regions > 0 || lb.closed {
		w.loopMu.Unlock()
		return
	}
	lb.closed = true
	w.loopMu.Unlock()
	lb.handOff()
}

// handOff closes the endpoint without waiting: the handle is closed now,
// and its release hands UCX's flush close to the worker, as for an
// endpoint garbage collected (but not counted as leaked).
func (lb *loopback) handOff() { lb.ep.res.Close() }

// closeLoopback is Worker.Close's: an idle loopback is closed now (handed
// to the worker, which drains it), one with regions open by the last of
// them to close.
func (w *Worker) closeLoopback() {
	w.loopMu.Lock()
	w.loopDone = true
	lb := w.loop.Value()
	if lb == nil || lb.closed || lb.regions > 0 {
		w.loopMu.Unlock()
		return
	}
	if lb.linger != nil {
		lb.linger.Stop()
	}
	lb.closed = true
	w.loopMu.Unlock()
	lb.handOff()
}

// give ends the hold, once (done set by the caller): completed says
// whether every operation started through the region is known to be
// complete; if not, the mapping goes to the quarantine when closed, as one
// whose key was handed out.
func (h *localHold) give(ctx context.Context, completed bool) error {
	if !completed {
		h.m.res.State.exposed.Store(true)
	}
	h.m.res.Release()
	return h.lb.leave(ctx)
}

// dropLocalHold is the cleanup of a region whose key was garbage collected
// without the region's Close.
func dropLocalHold(h *localHold) {
	if h.done.CompareAndSwap(false, true) {
		h.give(nil, false)
	}
}

// localCloseBound bounds LocalRegion.Close's completion of what was
// started through the loopback: nothing outside the process takes part in
// it, so only a worker that another goroutine keeps busy delays it.
const localCloseBound = time.Second

// Close closes the region's key (from then on its operations, and those of
// every RemoteRegion taken from it, return an error wrapping
// ucs.ErrClosed), completes what was started through the worker's loopback
// (an endpoint to this process: it waits for no peer, and at most a
// second), and lets the mapping go: closed already, it is unmapped now. An
// error says the completion did not finish; the mapping then goes to the
// quarantine when closed, as one whose key was handed out. A second Close
// does nothing.
func (l *LocalRegion) Close() error {
	const op = "ucp: close local region"
	if l == nil || l.hold == nil || !l.hold.done.CompareAndSwap(false, true) {
		return nil // nothing to close: cleanup code may close what it never got
	}
	l.cleanup.Stop()
	l.key.Close() // from here no operation starts through the region
	ctx, cancel := context.WithTimeout(context.Background(), localCloseBound)
	defer cancel()
	err := l.hold.lb.ep.Flush(ctx)
	if err != nil {
		err = asOp(op, err)
	}
	if cerr := l.hold.give(ctx, err == nil); err == nil && cerr != nil {
		err = asOp(op, cerr)
	}
	return err
}

// asOp is err as the error of op, the call the user made, when it came
// from a call op made (an unpack inside UnpackRegion, say).
func asOp(op string, err error) error {
	var e *ucs.Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	c.Op = op
	return &c
}
