package share

import (
	"context"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// The offload calls move a region's bytes between the exporter's memory
// and a third peer, reached through an endpoint of Importer.Worker: the
// DPU's job. In export mode the imported mapping is the local buffer of
// the operation, so the bytes go from the host's memory to the wire (and
// back) without a copy on this side; in rkey mode they pass through a
// staging buffer of WithStaging bytes, in chunks. The calls are the same
// in both modes.

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
		_, err = r.imp.pipeline(ctx, n, r.imp.o.chunk, r.imp.o.depth, func(a, b int) (ucp.Request, error) {
			return dst.PutMem(g.mem, off+a, b-a, dstOff+a)
		})
	} else {
		err = r.staged(ctx, n, func(st *ucp.Mem, so, a, b int) (ucp.Request, error) {
			return g.rr.GetMem(st, so, b-a, off+a)
		}, func(st *ucp.Mem, so, a, b int) (ucp.Request, error) {
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
		_, err = r.imp.pipeline(ctx, n, r.imp.o.chunk, r.imp.o.depth, func(a, b int) (ucp.Request, error) {
			return src.GetMem(g.mem, off+a, b-a, srcOff+a)
		})
	} else {
		err = r.staged(ctx, n, func(st *ucp.Mem, so, a, b int) (ucp.Request, error) {
			return src.GetMem(st, so, b-a, srcOff+a)
		}, func(st *ucp.Mem, so, a, b int) (ucp.Request, error) {
			return g.rr.PutMem(st, so, b-a, off+a)
		})
	}
	if err == nil {
		err = g.rr.Flush(ctx)
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
		err = r.withStaging(op, n, func(st *ucp.Mem) error {
			if _, err := r.imp.pipeline(ctx, n, r.imp.o.chunk, r.imp.o.depth, func(a, b int) (ucp.Request, error) {
				return g.rr.GetMem(st, a, b-a, off+a)
			}); err != nil {
				return err
			}
			return r.wait(ctx, func() (ucp.Request, error) { return ep.SendAMMem(id, header, st, 0, n, ucp.AMRndv) })
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
		err = r.withStaging(op, n, func(st *ucp.Mem) error {
			if err := r.wait(ctx, func() (ucp.Request, error) { return m.ReceiveIntoMem(st, 0) }); err != nil {
				return err
			}
			if _, err := r.imp.pipeline(ctx, n, r.imp.o.chunk, r.imp.o.depth, func(a, b int) (ucp.Request, error) {
				return g.rr.PutMem(st, a, b-a, off+a)
			}); err != nil {
				return err
			}
			return g.rr.Flush(ctx)
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
	_, err := r.imp.pipeline(ctx, 1, 1, 1, func(int, int) (ucp.Request, error) { return start() })
	return err
}

// staged moves n bytes through the staging buffer, chunk by chunk: get
// into one half, then put out of it while the next chunk is got into the
// other half.
func (r *Region) staged(ctx context.Context, n int, get, put func(st *ucp.Mem, stOff, a, b int) (ucp.Request, error)) error {
	return r.withStaging("share: offload", 0, func(st *ucp.Mem) error {
		half := st.Len() / 2
		chunk := min(r.imp.o.chunk, half)
		var puts [2]ucp.Request
		var started [2]bool
		var first error
		for i, a := 0, 0; a < n; i, a = i+1, a+chunk {
			b, h := min(a+chunk, n), i%2
			if started[h] {
				started[h] = false
				if err := r.imp.waitInFlight(ctx, puts[h]); err != nil {
					first = err
					break
				}
			}
			if err := r.wait(ctx, func() (ucp.Request, error) { return get(st, h*half, a, b) }); err != nil {
				first = err
				break
			}
			req, err := put(st, h*half, a, b)
			if err != nil {
				first = err
				break
			}
			puts[h], started[h] = req, true
		}
		for h := range puts {
			if started[h] {
				if err := r.imp.waitInFlight(ctx, puts[h]); err != nil && first == nil {
					first = err
				}
			}
		}
		return first
	})
}

// withStaging runs f with the region's staging buffer (made on first use)
// for an operation of n bytes, one call at a time.
func (r *Region) withStaging(op string, n int, f func(st *ucp.Mem) error) error {
	size := r.imp.o.staging
	if n > size {
		return errs.New(op, ucs.ErrOutOfRange, "%d bytes do not fit the %d-byte staging buffer of rkey mode (WithStaging)", n, size)
	}
	r.stagingMu.Lock()
	defer r.stagingMu.Unlock()
	if r.staging == nil {
		m, err := r.imp.ctx.Allocate(size)
		if err != nil {
			return err
		}
		r.staging = m
	}
	return f(r.staging)
}

func (r *Region) releaseStaging() {
	r.stagingMu.Lock()
	defer r.stagingMu.Unlock()
	if r.staging != nil {
		r.staging.Close()
		r.staging = nil
	}
}
