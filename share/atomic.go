package share

import (
	"context"
	"errors"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Add32 adds v to the 32-bit word at off (Region says what every atomic
// checks and needs).
func (r *Region) Add32(ctx context.Context, off int, v uint32) error {
	_, err := r.atomic(ctx, "share: atomic add", datapath.AtomicAdd, 4, off, uint64(v), 0)
	return err
}

// Add64 adds v to the 64-bit word at off (see Region).
func (r *Region) Add64(ctx context.Context, off int, v uint64) error {
	_, err := r.atomic(ctx, "share: atomic add", datapath.AtomicAdd, 8, off, v, 0)
	return err
}

// FetchAdd32 adds v to the 32-bit word at off and returns its value
// before (see Region).
func (r *Region) FetchAdd32(ctx context.Context, off int, v uint32) (uint32, error) {
	old, err := r.atomic(ctx, "share: atomic fetch-add", datapath.AtomicFetchAdd, 4, off, uint64(v), 0)
	return uint32(old), err
}

// FetchAdd64 adds v to the 64-bit word at off and returns its value
// before (see Region).
func (r *Region) FetchAdd64(ctx context.Context, off int, v uint64) (uint64, error) {
	return r.atomic(ctx, "share: atomic fetch-add", datapath.AtomicFetchAdd, 8, off, v, 0)
}

// Swap32 stores v in the 32-bit word at off and returns its value before
// (see Region).
func (r *Region) Swap32(ctx context.Context, off int, v uint32) (uint32, error) {
	old, err := r.atomic(ctx, "share: atomic swap", datapath.AtomicSwap, 4, off, uint64(v), 0)
	return uint32(old), err
}

// Swap64 stores v in the 64-bit word at off and returns its value before
// (see Region).
func (r *Region) Swap64(ctx context.Context, off int, v uint64) (uint64, error) {
	return r.atomic(ctx, "share: atomic swap", datapath.AtomicSwap, 8, off, v, 0)
}

// CompareAndSwap32 stores new in the 32-bit word at off if it holds old,
// and returns the value it held: old when the swap happened (see Region).
func (r *Region) CompareAndSwap32(ctx context.Context, off int, old, new uint32) (uint32, error) {
	v, err := r.atomic(ctx, "share: atomic compare-and-swap", datapath.AtomicCompareSwap, 4, off, uint64(new), uint64(old))
	return uint32(v), err
}

// CompareAndSwap64 stores new in the 64-bit word at off if it holds old,
// and returns the value it held: old when the swap happened (see Region).
func (r *Region) CompareAndSwap64(ctx context.Context, off int, old, new uint64) (uint64, error) {
	return r.atomic(ctx, "share: atomic compare-and-swap", datapath.AtomicCompareSwap, 8, off, new, old)
}

func (r *Region) atomic(ctx context.Context, op string, kind datapath.AtomicOp, size, off int, operand, compare uint64) (uint64, error) {
	// The arguments first, not counted (as WriteAt's span).
	if off < 0 || off > r.length || size > r.length-off {
		return 0, errs.New(op, ucs.ErrOutOfRange, "a %d-byte word at offset %d is outside region %s (%d bytes)", size, off, r.id, r.length)
	}
	if off%size != 0 {
		return 0, errs.New(op, ucs.ErrInvalidParam, "offset %d is not a multiple of the word's %d bytes", off, size)
	}
	v, err := r.atomicOnce(ctx, op, kind, size, off, operand, compare)
	if err == nil {
		r.imp.st.atomics.Add(1)
	} else {
		r.imp.st.errors.Add(1)
	}
	return v, err
}

func (r *Region) atomicOnce(ctx context.Context, op string, kind datapath.AtomicOp, size, off int, operand, compare uint64) (uint64, error) {
	if err := ctxEnded(op, ctx); err != nil {
		return 0, err
	}
	g, err := r.acquire(op, true)
	if err != nil {
		return 0, err
	}
	if kind != datapath.AtomicAdd && ucp.Prot(g.g.Prot)&ucp.ProtRemoteRead == 0 {
		r.release(g)
		return 0, errs.New(op, ErrAccess, "region %s is granted %s: a fetching atomic reads too (ReadWrite)", r.id, accessOf(ucp.Prot(g.g.Prot)))
	}
	if !g.dp {
		r.release(g)
		return 0, errs.New(op, ucs.ErrUnsupported, "atomics on a region are built for rkey mode only; this session runs in export mode")
	}
	v, err := r.imp.dp.Atomic(ctx, g.g.Gen, kind, size, off, operand, compare, func() { r.release(g) })
	if errors.Is(err, ucs.ErrNoElem) {
		// The exporter unmapped the generation (a removal or rotation
		// whose ctx ended) before this side heard of its revocation.
		return 0, &ucs.Error{Op: op, Err: ErrRevoked, Reason: "region " + r.id + " was revoked at the exporter", Wrapped: err}
	}
	return v, r.revokedDuring(op, err)
}
