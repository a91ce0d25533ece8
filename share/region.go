package share

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Region is one region of the exporter's memory as this session reaches
// it: ReadAt and WriteAt (io.ReaderAt, io.WriterAt) move bytes in place,
// pipelined, the same way in export and rkey mode, and the offload calls
// move them to and from third peers. A rotation switches it to the new
// grant without failing a call; a revocation fails every later call with
// an error wrapping ErrRevoked, and calls never touch the exporter's
// memory after the importer acknowledged it.
//
// The atomics (Add32, Add64, FetchAdd32, FetchAdd64, Swap32, Swap64,
// CompareAndSwap32, CompareAndSwap64) change a word of the exporter's
// memory (4 or 8 bytes, aligned: at an offset that is a multiple of its size) as
// one, with respect to the exporter's own atomic operations on that memory
// and to every other importer's. Add needs a writable grant (WriteOnly or
// ReadWrite); the others return the word found and need ReadWrite: else
// the error wraps ErrAccess. A word outside the region wraps
// ucs.ErrOutOfRange, a misaligned offset ucs.ErrInvalidParam, a revoked
// region ErrRevoked, a closed importer ErrClosed. In rkey mode the
// exporter's data path performs each with a CPU atomic on its mapping of
// the region, checking the grant, the bounds and the alignment again;
// export mode has none yet (ucs.ErrUnsupported). A ctx ended before the
// call performs nothing (the error wraps ucs.ErrCanceled or
// ucs.ErrTimedOut); when it ends during the call, the call returns such an
// error at once and the operation may yet be performed, before any
// acknowledgement of the grant (a revocation waits for it): retrying then
// may apply it twice. Each counts in ImporterStats: Atomics when it
// succeeds, Errors when it fails.
type Region struct {
	imp    *Importer
	id     string
	length int
	events chan regionEvent

	mu      sync.Mutex
	cond    sync.Cond
	cur     *igen // nil while switching or once revoked
	busy    bool  // a switch is in progress: calls wait
	err     error // set: revoked, calls fail with it
	revoked chan struct{}
}

type regionEvent struct {
	grant  *grant
	revoke *revokeMsg
	end    string
}

// igen is a generation in use: the grant and how calls reach the memory.
type igen struct {
	g    *grant
	dp   bool             // rkey mode: through the session's data path, which unpacked the key
	rr   ucp.RemoteRegion // export mode: the imported mapping's loopback region
	mem  *ucp.Mem         // export mode: the imported mapping
	lr   *ucp.LocalRegion // export mode: its loopback region
	refs int
}

func (imp *Importer) newRegion(g *grant) *Region {
	// busy until its first grant is in use: a call meanwhile waits for it.
	r := &Region{imp: imp, id: g.Region, length: int(g.Length), events: make(chan regionEvent, 16), revoked: make(chan struct{}), busy: true}
	r.cond.L = &r.mu
	imp.mu.Lock()
	imp.regions[g.Region] = r
	imp.every = append(imp.every, r)
	imp.mu.Unlock()
	imp.regionsWG.Add(1)
	go r.loop()
	return r
}

// regionFor is the region a later grant is for, made if new.
// A region revoked for good (removed, expired) stays so: a later grant
// of the same id, after the exporter shared a region under that id again,
// makes a new Region.
func (imp *Importer) regionFor(g *grant) *Region {
	imp.mu.Lock()
	r, closing := imp.regions[g.Region], imp.closing
	imp.mu.Unlock()
	if closing {
		return nil // the bye acknowledges the grant
	}
	if r != nil && r.Err() == nil {
		return r
	}
	return imp.newRegion(g)
}

// ID is the region's id, as the exporter named it.
func (r *Region) ID() string { return r.id }

// Len is the region's length in bytes.
func (r *Region) Len() int { return r.length }

// Access is what the grant in use allows: ReadAt needs ReadOnly, WriteAt
// WriteOnly (ReadWrite allows both); a call it does not allow fails with
// an error wrapping ErrAccess. It is 0 once no grant is in
// use (revoked).
func (r *Region) Access() Access {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return 0
	}
	return accessOf(ucp.Prot(r.cur.g.Prot))
}

// Revoked is closed once the region is revoked (a rotation is not a
// revocation).
func (r *Region) Revoked() <-chan struct{} { return r.revoked }

// Err is why the region is revoked, or nil.
func (r *Region) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Expires is when the grant in use ends, unless rotated first.
func (r *Region) Expires() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return time.Time{}
	}
	return r.cur.g.Expires
}

// loop applies the exporter's grants and revocations in order.
func (r *Region) loop() {
	defer r.imp.regionsWG.Done()
	for ev := range r.events {
		switch {
		case ev.grant != nil:
			r.rotate(ev.grant)
		case ev.revoke != nil:
			r.revoke(ev.revoke)
		case ev.end != "":
			ctx, cancel := context.WithTimeout(context.Background(), r.imp.o.handshake)
			r.retireAll(ctx, ev.end)
			cancel()
		}
	}
}

// install makes g the generation in use; ctx bounds the key's unpack.
func (r *Region) install(ctx context.Context, g *grant) error {
	n, err := r.open(ctx, g)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.cur, r.busy = n, false
	r.cond.Broadcast()
	r.mu.Unlock()
	return nil
}

// open reaches g's memory: the packed region unpacked by the session's
// data path on its endpoint to the exporter's (rkey mode), or the
// descriptor imported and reached through a loopback region (export mode).
func (r *Region) open(ctx context.Context, g *grant) (*igen, error) {
	imp := r.imp
	if g.Mode == ModeRkey {
		addr, length, err := imp.dp.Unpack(ctx, g.Gen, g.Key)
		if err != nil {
			return nil, err
		}
		if addr != g.Address || length != g.Length {
			imp.dp.Drop(ctx, g.Gen)
			return nil, &ucs.Error{Op: "share: open grant", Err: ErrGrant, Reason: fmt.Sprintf("the packed region is %d bytes at %#x, the grant says %d at %#x", length, addr, g.Length, g.Address)}
		}
		return &igen{g: g, dp: true}, nil
	}
	d, err := ucp.ParseDescriptor(g.Key)
	if err != nil {
		return nil, err
	}
	mem, err := imp.ctx.Import(d)
	if err != nil {
		return nil, err
	}
	lr, err := imp.w.LocalRegion(ctx, mem)
	if err != nil {
		mem.Close()
		return nil, err
	}
	return &igen{g: g, rr: lr.RemoteRegion, mem: mem, lr: lr}, nil
}

// rotate switches to the newer grant g and acknowledges the old one once
// no call uses it. In rkey mode the new key is unpacked first and calls go
// on meanwhile; in export mode the old mapping must be gone before the
// new one of the same range is imported, so calls wait for the switch.
func (r *Region) rotate(g *grant) {
	imp := r.imp
	ctx, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
	defer cancel()
	var next *igen
	var err error
	if g.Mode == ModeRkey {
		next, err = r.open(ctx, g)
	}
	r.mu.Lock()
	old := r.cur
	r.cur, r.busy = nil, true
	for old != nil && old.refs > 0 {
		r.cond.Wait()
	}
	r.mu.Unlock()
	if old != nil {
		r.retire(ctx, old)
		imp.st.rotations.Add(1)
	}
	if g.Mode == ModeExport {
		next, err = r.open(ctx, g)
	}
	r.mu.Lock()
	r.busy = false
	revoked := r.err != nil // meanwhile: the new grant is dropped at once
	if err != nil {
		r.setErrLocked(&ucs.Error{Op: "share: rotate", Err: ErrRevoked, Reason: "the new grant could not be used", Wrapped: err})
	} else if !revoked {
		r.cur = next
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	if err == nil && revoked {
		r.retire(ctx, next)
	}
	if err != nil {
		imp.st.errors.Add(1)
		imp.send(frameRefuse, encodeRefuse(err))
	}
}

// revoke drops the generation m names (every one for 0) and acknowledges.
func (r *Region) revoke(m *revokeMsg) {
	r.mu.Lock()
	old := r.cur
	if old == nil || (m.Gen != 0 && old.g.Gen != m.Gen) {
		r.mu.Unlock()
		return // retired already (a rotation acknowledged it)
	}
	r.cur = nil
	r.setErrLocked(&ucs.Error{Op: "share: region " + r.id, Err: ErrRevoked, Reason: reasonText(m.Reason)})
	for old.refs > 0 {
		r.cond.Wait()
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), r.imp.o.handshake)
	defer cancel()
	r.retire(ctx, old)
}

// retireAll revokes the region locally (the session is over) and drops its
// generation.
func (r *Region) retireAll(ctx context.Context, reason string) {
	r.mu.Lock()
	old := r.cur
	r.cur = nil
	r.setErrLocked(&ucs.Error{Op: "share: region " + r.id, Err: ErrRevoked, Reason: reason})
	for old != nil && old.refs > 0 {
		r.cond.Wait()
	}
	r.mu.Unlock()
	if old != nil {
		r.retire(ctx, old)
	}
}

func (r *Region) setErrLocked(err error) {
	if r.err == nil {
		r.err = err
		close(r.revoked)
	}
	r.cond.Broadcast()
}

// retire flushes what calls wrote through old, releases its key or
// mapping, and acknowledges it to the exporter.
// A write whose flush failed may still be on its way: then no
// acknowledgement is sent, and the exporter, left waiting, closes the
// session by force before it unmaps.
func (r *Region) retire(ctx context.Context, old *igen) {
	imp := r.imp
	var err error
	if old.dp {
		err = imp.dp.Drop(ctx, old.g.Gen)
	}
	if old.lr != nil {
		err = old.lr.Close()
		old.mem.Close()
	}
	if err != nil {
		imp.st.errors.Add(1)
		return
	}
	imp.send(frameAck, (&ackMsg{Gen: old.g.Gen, Region: old.g.Region}).encode())
	imp.lg.log(slog.LevelInfo, "share: acknowledged", imp.sessionAttr(), slog.String("region", old.g.Region), slog.Uint64("gen", old.g.Gen))
}

// acquire is the generation a call uses, held until release.
func (r *Region) acquire(op string, write bool) (*igen, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.busy && r.err == nil {
		r.cond.Wait()
	}
	if r.err != nil {
		if r.imp.closedByUser.Load() { // the program's own Close: closed, not revoked
			return nil, &ucs.Error{Op: op, Err: ErrClosed, Reason: "the importer was closed", Wrapped: r.err}
		}
		return nil, &ucs.Error{Op: op, Err: ErrRevoked, Reason: "region " + r.id + " is revoked", Wrapped: r.err}
	}
	g := r.cur
	if g == nil {
		return nil, &ucs.Error{Op: op, Err: ErrRevoked, Reason: "region " + r.id + " has no grant in use"}
	}
	if !time.Now().Before(g.g.Expires) {
		return nil, &ucs.Error{Op: op, Err: ErrRevoked, Reason: "the lease of region " + r.id + " expired at " + g.g.Expires.Format(time.RFC3339)}
	}
	need, what := ucp.ProtRemoteRead, "read"
	if write {
		need, what = ucp.ProtRemoteWrite, "write"
	}
	if ucp.Prot(g.g.Prot)&need == 0 {
		return nil, errs.New(op, ErrAccess, "region %s is granted %s: no remote %s", r.id, accessOf(ucp.Prot(g.g.Prot)), what)
	}
	g.refs++
	return g, nil
}

func (r *Region) release(g *igen) {
	r.mu.Lock()
	g.refs--
	if g.refs == 0 {
		r.cond.Broadcast()
	}
	r.mu.Unlock()
}

// span checks n bytes at off against the region.
func (r *Region) span(op string, off int64, n int) error {
	if off < 0 || off > int64(r.length) || int64(n) > int64(r.length)-off {
		return errs.New(op, ucs.ErrOutOfRange, "%d bytes at offset %d are outside region %s (%d bytes)", n, off, r.id, r.length)
	}
	return nil
}

// ReadAt reads len(p) bytes at off (io.ReaderAt; fewer, with io.EOF,
// where the region ends first; none, with io.EOF, at or past its end; a
// negative off is an error wrapping ucs.ErrOutOfRange).
func (r *Region) ReadAt(p []byte, off int64) (int, error) {
	return r.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt bounded by ctx. The bytes move straight into p,
// split into operations of WithChunk bytes, WithDepth of them in flight.
// When ctx ends it starts no more and returns once those in flight have
// completed or failed (Close fails them): p is never written after it
// returns.
func (r *Region) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	const op = "share: read"
	if off > int64(r.length) && len(p) > 0 {
		return 0, io.EOF // past the end, as bytes.Reader and os.File say
	}
	if off >= 0 && off <= int64(r.length) && int64(len(p)) > int64(r.length)-off {
		n, err := r.ReadAtContext(ctx, p[:int64(r.length)-off], off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	if err := r.span(op, off, len(p)); err != nil {
		return 0, err
	}
	n, err := r.move(ctx, op, p, off, false)
	r.imp.count(false, n, err)
	return n, err
}

// WriteAt writes p at off (io.WriterAt) and returns once the bytes are in
// the exporter's memory. A write that does not fit writes nothing.
func (r *Region) WriteAt(p []byte, off int64) (int, error) {
	return r.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext is WriteAt bounded by ctx, pipelined as ReadAtContext;
// when ctx ends it starts no more, waits for those in flight, and returns
// how far the bytes got in order.
func (r *Region) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	const op = "share: write"
	if err := r.span(op, off, len(p)); err != nil {
		return 0, err
	}
	n, err := r.move(ctx, op, p, off, true)
	r.imp.count(true, n, err)
	return n, err
}

func (imp *Importer) count(write bool, n int, err error) {
	if write {
		imp.st.writes.Add(1)
		imp.st.bytesWritten.Add(int64(n))
	} else {
		imp.st.reads.Add(1)
		imp.st.bytesRead.Add(int64(n))
	}
	if err != nil {
		imp.st.errors.Add(1)
	}
}

// move runs the chunks of one call on the generation in use.
func (r *Region) move(ctx context.Context, op string, p []byte, off int64, write bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	g, err := r.acquire(op, write)
	if err != nil {
		return 0, err
	}
	defer r.release(g)
	if g.dp {
		var n int
		if b, boff := r.imp.bufferOf(p); b != nil {
			n, err = r.moveDirect(ctx, p, off, write, g, b, boff)
			b.release()
		} else {
			n, err = r.moveStaged(ctx, p, off, write, g)
		}
		return n, r.revokedDuring(op, err)
	}
	start := func(a, b int) (ucp.Request, error) {
		if write {
			return g.rr.Put(p[a:b], int(off)+a)
		}
		return g.rr.Get(p[a:b], int(off)+a)
	}
	n, err := pipeline(r.imp, ctx, len(p), r.imp.o.chunk, r.imp.o.depth, start)
	if write && err == nil {
		if err = g.rr.Flush(ctx); err != nil {
			n = 0
		}
	}
	return n, r.revokedDuring(op, err)
}

// moveStaged is move in rkey mode: each chunk goes through the staging
// file the session's data path shares with this process, in one of the
// call slots (WithDepth chunks of WithChunk bytes); the data path moves it
// between the exporter's memory and the slot, this process copies it
// between the slot and p.
func (r *Region) moveStaged(ctx context.Context, p []byte, off int64, write bool, g *igen) (int, error) {
	imp := r.imp
	slot, err := imp.takeCall(ctx)
	if err != nil {
		return 0, err
	}
	defer imp.giveCall(slot)
	stage := imp.stage.Bytes()
	chunk, depth := imp.o.chunk, imp.depth()
	base := slot * chunk * depth
	start := func(a, b int) (*stagedMove, error) {
		so := base + (a/chunk)%depth*chunk
		m := &stagedMove{}
		if write {
			copy(stage[so:so+b-a], p[a:b])
		} else {
			m.to, m.from = p[a:b], stage[so:so+b-a]
		}
		m.mv = imp.dp.Move(g.g.Gen, write, int(off)+a, so, b-a)
		return m, nil
	}
	n, err := pipeline(imp, ctx, len(p), chunk, depth, start)
	if write && err == nil {
		if err = waitInFlight(imp, ctx, imp.dp.Flush(g.g.Gen)); err != nil {
			n = 0
		}
	}
	return n, err
}

// moveDirect is move in rkey mode for p within Buffer b (at boff): one
// request; the data path moves the bytes between the exporter's memory and
// the buffer itself, pipelined, and this process copies nothing. When ctx
// ends the data path is asked to start no more, and the call returns once
// those in flight ended.
func (r *Region) moveDirect(ctx context.Context, p []byte, off int64, write bool, g *igen, b *Buffer, boff int) (int, error) {
	imp := r.imp
	if err := ctx.Err(); err != nil {
		return 0, stopped(err, 0, len(p))
	}
	mv := imp.dp.MoveBuffer(g.g.Gen, write, int(off), b.id, boff, len(p))
	err := mv.Wait(ctx)
	if err != nil && ctx.Err() != nil && err == ctx.Err() {
		imp.dp.Cancel(mv)
		waitInFlight(imp, ctx, mv)
		return mv.Done(), stopped(ctx.Err(), mv.Done(), len(p))
	}
	if err != nil {
		return mv.Done(), err
	}
	if write {
		if err := waitInFlight(imp, ctx, imp.dp.Flush(g.g.Gen)); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// stopped is the error of a call whose ctx ended after done of total
// bytes.
func stopped(ce error, done, total int) error {
	return errs.Ctx("share: transfer", ce, fmt.Sprintf("stopped after %d of %d bytes", done, total))
}

// stagedMove is one chunk of moveStaged in flight: a read copies the slot
// into p once the data path has filled it.
type stagedMove struct {
	mv       *datapath.Move
	to, from []byte
}

func (m *stagedMove) Wait(ctx context.Context) error {
	err := m.mv.Wait(ctx)
	if err == nil && m.to != nil {
		copy(m.to, m.from)
		m.to = nil
	}
	return err
}

// revokedDuring is err, or for a call the region's revocation (or the
// session's end) overtook, an error wrapping ErrRevoked that keeps err:
// UCX then reports what the closed endpoint did to the call.
func (r *Region) revokedDuring(op string, err error) error {
	if err == nil || errors.Is(err, ErrRevoked) {
		return err
	}
	if cause := r.Err(); cause != nil {
		return &ucs.Error{Op: op, Err: ErrRevoked, Reason: "region " + r.id + " was revoked during the call", Wrapped: err}
	}
	return err
}

// inflight is an operation in flight: a UCX request, or a move in the
// session's data path.
type inflight interface {
	Wait(ctx context.Context) error
}

// pipeline runs start over [0,total) in chunks, depth in flight; it
// returns the length of the prefix that completed, and the first error.
// Every operation it started is complete when it returns: once ctx ended
// it waits for those in flight for the dial timeout more, then ends the
// data path by force (waitInFlight), which fails them.
func pipeline[R inflight](imp *Importer, ctx context.Context, total, chunk, depth int, start func(a, b int) (R, error)) (int, error) {
	type slot struct {
		req  R
		a, b int
	}
	var ring [maxDepth]slot
	depth = min(depth, len(ring))
	head, tail := 0, 0 // ring[head%depth..tail%depth) in flight
	next, done := 0, 0
	var first error
	for {
		for first == nil && next < total && tail-head < depth {
			if err := ctx.Err(); err != nil {
				first = err
				break
			}
			b := min(next+chunk, total)
			req, err := start(next, b)
			if err != nil {
				first = err
				break
			}
			ring[tail%depth] = slot{req, next, b}
			tail++
			next = b
		}
		if head == tail {
			break
		}
		s := &ring[head%depth]
		if err := waitInFlight(imp, ctx, s.req); err != nil && first == nil {
			first = err
		}
		if first == nil && s.a == done {
			done = s.b
		}
		head++
	}
	if first != nil {
		if ce := ctx.Err(); ce != nil && first == ce {
			first = stopped(ce, done, total)
		}
	}
	return done, first
}

// waitInFlight waits for an operation whose buffer the caller is about to
// give back: without a bound while ctx lasts, then for the dial timeout;
// an operation still in flight then has the session's data path ended
// under it, which ends it (export mode has no data path: its operations
// are local).
func waitInFlight[R inflight](imp *Importer, ctx context.Context, req R) error {
	err := req.Wait(ctx)
	if err == nil || ctx.Err() == nil {
		return err
	}
	grace, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
	defer cancel()
	if err = req.Wait(grace); err == nil || grace.Err() == nil || imp.dp == nil {
		if err != nil && grace.Err() != nil {
			return req.Wait(context.Background())
		}
		return err
	}
	imp.endAll("an operation did not complete within the dial timeout after its call's ctx ended; the data path was ended")
	imp.dp.Close()
	return req.Wait(context.Background())
}
