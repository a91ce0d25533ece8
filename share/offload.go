package share

import (
	"context"
	"unsafe"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// The offload calls move a region's bytes between the exporter's memory
// and a third peer, reached through an endpoint of Importer.Worker: the
// DPU's job. In export mode the imported mapping is the local buffer of
// the operation, so the bytes go from the host's memory to the wire (and
// back) without a copy on this side; in rkey mode they pass through the
// staging area (WithStaging bytes) of the file this process shares with
// the session's data path, in chunks: the data path moves them between
// the exporter's memory and the area, this process's worker between the
// area and the peer. The calls are the same in both modes; in rkey mode
// one runs at a time per session.

// CopyTo copies n bytes of the region at off to dst at dstOff (a region of
// a third peer) and returns once they are in dst's memory.
func (r *Region) CopyTo(ctx context.Context, dst ucp.RemoteRegion, dstOff, off, n int) error {
	const op = "share: copy to peer"
	if err := r.span(op, int64(off), n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	g, err := r.acquire(op, false)
	if err != nil {
		return err
	}
	defer r.release(g)
	if g.mem != nil {
		_, err = pipeline(r.imp, ctx, n, r.imp.o.chunk, r.imp.o.depth, func(a, b int) (ucp.Request, error) {
			return dst.PutMem(g.mem, off+a, b-a, dstOff+a)
		})
	} else {
		err = r.staged(ctx, n, func(st *ucp.Mem, so, a, b int) (inflight, error) {
			return r.imp.dp.Move(g.g.Gen, false, off+a, so, b-a), nil
		}, func(st *ucp.Mem, so, a, b int) (inflight, error) {
			return dst.PutMem(st, so, b-a, dstOff+a)
		})
	}
	if err == nil {
		err = dst.Flush(ctx)
	}
	err = r.revokedDuring(op, err)
	r.imp.count(false, ifOK(n, err), err)
	return err
}

// CopyFrom copies n bytes of src at srcOff (a region of a third peer) into
// the region at off and returns once they are in the exporter's memory.
func (r *Region) CopyFrom(ctx context.Context, src ucp.RemoteRegion, srcOff, off, n int) error {
	const op = "share: copy from peer"
	if err := r.span(op, int64(off), n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	g, err := r.acquire(op, true)
	if err != nil {
		return err
	}
	defer r.release(g)
	if g.mem != nil {
		_, err = pipeline(r.imp, ctx, n, r.imp.o.chunk, r.imp.o.depth, func(a, b int) (ucp.Request, error) {
			return src.GetMem(g.mem, off+a, b-a, srcOff+a)
		})
		if err == nil {
			err = g.rr.Flush(ctx)
		}
	} else {
		err = r.staged(ctx, n, func(st *ucp.Mem, so, a, b int) (inflight, error) {
			return src.GetMem(st, so, b-a, srcOff+a)
		}, func(st *ucp.Mem, so, a, b int) (inflight, error) {
			return r.imp.dp.Move(g.g.Gen, true, off+a, so, b-a), nil
		})
		if err == nil {
			err = waitInFlight(r.imp, ctx, r.imp.dp.Flush(g.g.Gen))
		}
	}
	err = r.revokedDuring(op, err)
	r.imp.count(true, ifOK(n, err), err)
	return err
}

// SendAM sends n bytes of the region at off to ep as one active message
// (rendezvous, as UCX's DPU daemon sends a host's buffer) and returns once
// it is sent. In rkey mode n is at most the staging size.
func (r *Region) SendAM(ctx context.Context, ep *ucp.Endpoint, id ucp.AMID, header []byte, off, n int) error {
	const op = "share: send active message"
	if err := r.span(op, int64(off), n); err != nil {
		return err
	}
	g, err := r.acquire(op, false)
	if err != nil {
		return err
	}
	defer r.release(g)
	if g.mem != nil {
		err = r.wait(ctx, func() (ucp.Request, error) { return ep.SendAMMem(id, header, g.mem, off, n, ucp.AMRndv) })
	} else {
		err = r.withStaging(op, n, func(st *ucp.Mem, base int) error {
			if err := waitInFlight(r.imp, ctx, r.imp.dp.Move(g.g.Gen, false, off, base, n)); err != nil {
				return err
			}
			return r.wait(ctx, func() (ucp.Request, error) { return ep.SendAMMem(id, header, st, base, n, ucp.AMRndv) })
		})
	}
	err = r.revokedDuring(op, err)
	r.imp.count(false, ifOK(n, err), err)
	return err
}

// ReceiveAM receives the payload of m (an active message from a third
// peer) into the region at off and returns its length once it is in the
// exporter's memory. In rkey mode it is at most the staging size.
func (r *Region) ReceiveAM(ctx context.Context, m *ucp.AMMessage, off int) (int, error) {
	const op = "share: receive active message"
	n := m.Len()
	if err := r.span(op, int64(off), n); err != nil {
		m.Drop()
		return 0, err
	}
	g, err := r.acquire(op, true)
	if err != nil {
		m.Drop()
		return 0, err
	}
	defer r.release(g)
	if g.mem != nil {
		err = r.wait(ctx, func() (ucp.Request, error) { return m.ReceiveIntoMem(g.mem, off) })
	} else {
		err = r.withStaging(op, n, func(st *ucp.Mem, base int) error {
			if err := r.wait(ctx, func() (ucp.Request, error) { return m.ReceiveIntoMem(st, base) }); err != nil {
				return err
			}
			if err := waitInFlight(r.imp, ctx, r.imp.dp.Move(g.g.Gen, true, off, base, n)); err != nil {
				return err
			}
			return waitInFlight(r.imp, ctx, r.imp.dp.Flush(g.g.Gen))
		})
		if err != nil {
			m.Drop()
		}
	}
	err = r.revokedDuring(op, err)
	r.imp.count(true, ifOK(n, err), err)
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

// staged moves n bytes through the staging area, chunk by chunk: in fills
// one half, then out empties it while the next chunk fills the other half.
// Both get the area's registration in this process and the offset of the
// half in it.
func (r *Region) staged(ctx context.Context, n int, in, out func(st *ucp.Mem, stOff, a, b int) (inflight, error)) error {
	return r.withStaging("share: offload", 0, func(st *ucp.Mem, base int) error {
		half := r.imp.o.staging / 2
		chunk := min(r.imp.o.chunk, half)
		var outs [2]inflight
		var first error
		for i, a := 0, 0; a < n; i, a = i+1, a+chunk {
			b, h := min(a+chunk, n), i%2
			if outs[h] != nil {
				err := waitInFlight(r.imp, ctx, outs[h])
				outs[h] = nil
				if err != nil {
					first = err
					break
				}
			}
			req, err := in(st, base+h*half, a, b)
			if err == nil {
				err = waitInFlight(r.imp, ctx, req)
			}
			if err != nil {
				first = err
				break
			}
			if outs[h], err = out(st, base+h*half, a, b); err != nil {
				outs[h] = nil
				first = err
				break
			}
		}
		for h := range outs {
			if outs[h] != nil {
				if err := waitInFlight(r.imp, ctx, outs[h]); err != nil && first == nil {
					first = err
				}
			}
		}
		return first
	})
}

// withStaging runs f with the session's staging area (registered in this
// process's context on first use) for an operation of n bytes, one at a
// time: f gets the registration and the area's offset in it.
func (r *Region) withStaging(op string, n int, f func(st *ucp.Mem, base int) error) error {
	imp := r.imp
	size := imp.o.staging
	if n > size {
		return errs.New(op, ucs.ErrOutOfRange, "%d bytes do not fit the %d-byte staging buffer of rkey mode (WithStaging)", n, size)
	}
	imp.offMu.Lock()
	defer imp.offMu.Unlock()
	if imp.stageMem == nil {
		ctx, err := imp.ucx()
		if err != nil {
			return err
		}
		b := imp.stage.Bytes()
		m, err := ctx.RegisterPointer(unsafe.Pointer(unsafe.SliceData(b)), len(b))
		if err != nil {
			return err
		}
		imp.stageMem = m
	}
	return f(imp.stageMem, imp.offBase)
}
