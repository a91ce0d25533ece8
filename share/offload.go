package share

import (
	"context"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// The offload calls move a region's bytes between the exporter's memory
// and a third peer (ConnectPeer): the DPU's job. In rkey mode the
// session's data path moves them, through the offload area of the staging
// file (WithStaging bytes), in chunks, and this process only asks: no UCX
// of the session, the peer's connection included, runs here. In export
// mode the imported mapping is the local buffer of the operation, so the
// bytes go from the host's memory to the wire (and back) without a copy.
// The calls are the same in both modes; one runs at a time per session.

// PeerRange is n bytes of a third peer's region at off: the far side of
// Region.CopyTo and CopyFrom. Make one with PeerRegion.Range; it is a
// value, checked (the region open, off and n within it) by the call that
// uses it. A typed range keeps the peer's range and the region's offset
// apart: the compiler refuses one passed for the other.
type PeerRange struct {
	r      *PeerRegion
	off, n int
}

// Range is the n bytes of r at off (see PeerRange).
func (r *PeerRegion) Range(off, n int) PeerRange { return PeerRange{r, off, n} }

// Len is the range's length.
func (pr PeerRange) Len() int { return pr.n }

// CopyTo copies dst.Len() bytes of the region at off into the peer's range
// dst, and returns once they are in the peer's memory.
func (r *Region) CopyTo(ctx context.Context, dst PeerRange, off int) error {
	const op = "share: copy to peer"
	return r.copyPeer(ctx, op, dst, off, false)
}

// CopyFrom copies the peer's range src into the region at off, and returns
// once the bytes are in the exporter's memory.
func (r *Region) CopyFrom(ctx context.Context, src PeerRange, off int) error {
	const op = "share: copy from peer"
	return r.copyPeer(ctx, op, src, off, true)
}

func (r *Region) copyPeer(ctx context.Context, op string, rng PeerRange, off int, write bool) error {
	pr, prOff, n := rng.r, rng.off, rng.n
	if err := r.span(op, int64(off), n); err != nil {
		return err
	}
	if pr == nil || pr.peer.imp != r.imp {
		return errs.New(op, ucs.ErrInvalidParam, "the peer region is not of this region's importer")
	}
	if err := pr.usable(op, prOff, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	g, err := r.acquire(op, write)
	if err != nil {
		return err
	}
	imp := r.imp
	imp.offMu.Lock()
	release := func() { imp.offMu.Unlock(); r.release(g) }
	if g.dp {
		if write {
			err = offloaded(imp, ctx, imp.dp.CopyFrom(g.g.Gen, off, n, pr.id, prOff), release)
		} else {
			err = offloaded(imp, ctx, imp.dp.CopyTo(g.g.Gen, off, n, pr.id, prOff), release)
		}
	} else {
		defer release()
		_, err = pipeline(imp, ctx, n, imp.o.chunk, imp.o.depth, func(a, b int) (ucp.Request, error) {
			if write {
				return pr.rr.GetMem(g.mem.Range(off+a, b-a), prOff+a)
			}
			return pr.rr.PutMem(g.mem.Range(off+a, b-a), prOff+a)
		})
		if err == nil {
			if write {
				err = g.rr.Flush(ctx)
			} else {
				err = pr.rr.Flush(ctx)
			}
		}
	}
	err = r.revokedDuring(op, wrapOff(op, err))
	imp.count(write, ifOK(n, err), err)
	return err
}

// offloaded waits for an offload operation of the session's data path
// while ctx lasts, then calls release. When ctx ends first, it returns at
// once with ctx's error and leaves the operation to end in the background
// (as waitInFlight ends it: within WithHandshakeTimeout, or with the data path),
// holding the offload area and the region's generation until then: the
// next offload call, and a revocation of the region, wait for it.
func offloaded[R inflight](imp *Importer, ctx context.Context, req R, release func()) error {
	err := req.Wait(ctx)
	if err == nil || ctx.Err() == nil {
		release()
		return err
	}
	go func() {
		waitInFlight(imp, ctx, req)
		release()
	}()
	return errs.Ctx("share: offload", ctx.Err(), "the call's ctx ended with the operation in flight; it ends in the background, holding the offload area until then")
}

// wrapOff is an offload's error: the data path's as this package's.
func wrapOff(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*ucs.Error); ok {
		return err
	}
	return &ucs.Error{Op: op, Err: ucs.ErrIOError, Wrapped: err}
}

// SendAM sends n bytes of the region at off to peer as one active message
// id with header (rendezvous, as UCX's DPU daemon sends a host's buffer)
// and returns once it is sent. In rkey mode n is at most WithStaging.
func (r *Region) SendAM(ctx context.Context, peer *Peer, id AMID, header []byte, off, n int) error {
	const op = "share: send active message"
	if err := r.span(op, int64(off), n); err != nil {
		return err
	}
	if peer == nil || peer.imp != r.imp {
		return errs.New(op, ucs.ErrInvalidParam, "the peer is not of this region's importer")
	}
	if err := peer.usable(op); err != nil {
		return err
	}
	imp := r.imp
	if imp.dp != nil && n > imp.o.staging {
		return errs.New(op, ucs.ErrOutOfRange, "%d bytes do not fit the %d-byte staging area of rkey mode (WithStaging)", n, imp.o.staging)
	}
	g, err := r.acquire(op, false)
	if err != nil {
		return err
	}
	imp.offMu.Lock()
	release := func() { imp.offMu.Unlock(); r.release(g) }
	if g.dp {
		err = offloaded(imp, ctx, imp.dp.SendAM(g.g.Gen, off, n, peer.id, uint16(id), header), release)
	} else {
		err = r.wait(ctx, func() (ucp.Request, error) { return peer.ep.SendAMMem(id, header, g.mem.Range(off, n), ucp.AMRndv) })
		release()
	}
	err = r.revokedDuring(op, wrapOff(op, err))
	imp.count(false, ifOK(n, err), err)
	return err
}

// ReceiveAM receives the payload of m (an active message from a third
// peer, AMQueue) into the region at off and returns its length once it is
// in the exporter's memory. In rkey mode it is at most WithStaging. A
// message not received is dropped.
func (r *Region) ReceiveAM(ctx context.Context, m *AMMessage, off int) (int, error) {
	const op = "share: receive active message"
	if m == nil || m.imp != r.imp {
		return 0, errs.New(op, ucs.ErrInvalidParam, "the message is not of this region's importer")
	}
	n := m.Len()
	if err := r.span(op, int64(off), n); err != nil {
		m.Drop()
		return 0, err
	}
	imp := r.imp
	if imp.dp != nil && n > imp.o.staging {
		m.Drop()
		return 0, errs.New(op, ucs.ErrOutOfRange, "%d bytes do not fit the %d-byte staging area of rkey mode (WithStaging)", n, imp.o.staging)
	}
	g, err := r.acquire(op, true)
	if err != nil {
		m.Drop()
		return 0, err
	}
	imp.offMu.Lock()
	release := func() { imp.offMu.Unlock(); r.release(g) }
	taken := false
	m.once.Do(func() { taken = true })
	if !taken {
		release()
		return 0, errs.New(op, ucs.ErrInvalidParam, "the message was received or dropped already")
	}
	if g.dp {
		err = offloaded(imp, ctx, imp.dp.ReceiveAM(g.g.Gen, off, n, m.id), release)
	} else {
		err = r.wait(ctx, func() (ucp.Request, error) { return m.m.ReceiveIntoMem(g.mem.Range(off, n)) })
		if err != nil {
			m.m.Drop()
		}
		release()
	}
	err = r.revokedDuring(op, wrapOff(op, err))
	imp.count(true, ifOK(n, err), err)
	return ifOK(n, err), err
}

func ifOK(n int, err error) int {
	if err != nil {
		return 0
	}
	return n
}

// wait starts one operation and waits for it; when ctx ends first it
// still waits for the operation to end (see pipeline), so that its buffer
// is not reused under it.
func (r *Region) wait(ctx context.Context, start func() (ucp.Request, error)) error {
	_, err := pipeline(r.imp, ctx, 1, 1, 1, func(int, int) (ucp.Request, error) { return start() })
	return err
}
