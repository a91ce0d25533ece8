package share

import (
	"context"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Atomics on a Region: a word of the exporter's memory (4 or 8 bytes at
// an offset aligned to its size) changed as one, with respect to the
// exporter's own atomic operations on that memory and to every other
// importer's. Add needs a writable grant (WriteOnly or ReadWrite); the
// fetching operations return the word found and need ReadWrite, else the
// error wraps ErrAccess. A word outside the region wraps ucs.ErrOutOfRange,
// a misaligned offset ucs.ErrInvalidParam. In rkey mode the exporter's
// data path performs each with a CPU atomic on its mapping of the region
// (the exporter checks the grant, the bounds and the alignment again);
// export mode has no atomics yet (ucs.ErrUnsupported). When ctx ends first
// the call returns an error wrapping ucs.ErrTimedOut or ucs.ErrCanceled and
// the operation may yet be performed, before any acknowledgement of the
// grant: a revocation waits for it.

// Add32 adds v to the 32-bit word at off.
func (r *Region) Add32(ctx context.Context, off int, v uint32) error {
	_, err := r.atomic(ctx, "share: atomic add", datapath.AtomicAdd, 4, off, uint64(v), 0)
	return err
}

// Add64 adds v to the 64-bit word at off.
func (r *Region) Add64(ctx context.Context, off int, v uint64) error {
	_, err := r.atomic(ctx, "share: atomic add", datapath.AtomicAdd, 8, off, v, 0)
	return err
}

// FetchAdd32 adds v to the 32-bit word at off and returns its value before.
func (r *Region) FetchAdd32(ctx context.Context, off int, v uint32) (uint32, error) {
	old, err := r.atomic(ctx, "share: atomic fetch-add", datapath.AtomicFetchAdd, 4, off, uint64(v), 0)
	return uint32(old), err
}

// FetchAdd64 adds v to the 64-bit word at off and returns its value before.
func (r *Region) FetchAdd64(ctx context.Context, off int, v uint64) (uint64, error) {
	return r.atomic(ctx, "share: atomic fetch-add", datapath.AtomicFetchAdd, 8, off, v, 0)
}

// Swap32 stores v in the 32-bit word at off and returns its value before.
func (r *Region) Swap32(ctx context.Context, off int, v uint32) (uint32, error) {
	old, err := r.atomic(ctx, "share: atomic swap", datapath.AtomicSwap, 4, off, uint64(v), 0)
	return uint32(old), err
}

// Swap64 stores v in the 64-bit word at off and returns its value before.
func (r *Region) Swap64(ctx context.Context, off int, v uint64) (uint64, error) {
	return r.atomic(ctx, "share: atomic swap", datapath.AtomicSwap, 8, off, v, 0)
}

// CompareAndSwap32 stores new in the 32-bit word at off if it holds old,
// and returns the value it held: old when the swap happened.
func (r *Region) CompareAndSwap32(ctx context.Context, off int, old, new uint32) (uint32, error) {
	v, err := r.atomic(ctx, "share: atomic compare-and-swap", datapath.AtomicCompareSwap, 4, off, uint64(new), uint64(old))
	return uint32(v), err
}

// CompareAndSwap64 stores new in the 64-bit word at off if it holds old,
// and returns the value it held: old when the swap happened.
func (r *Region) CompareAndSwap64(ctx context.Context, off int, old, new uint64) (uint64, error) {
	return r.atomic(ctx, "share: atomic compare-and-swap", datapath.AtomicCompareSwap, 8, off, new, old)
}

func (r *Region) atomic(ctx context.Context, op string, kind datapath.AtomicOp, size, off int, operand, compare uint64) (uint64, error) {
	if off < 0 || off > r.length || size > r.length-off {
		return 0, errs.New(op, ucs.ErrOutOfRange, "a %d-byte word at offset %d is outside region %s (%d bytes)", size, off, r.id, r.length)
	}
	if off%size != 0 {
		return 0, errs.New(op, ucs.ErrInvalidParam, "offset %d is not a multiple of the word's %d bytes", off, size)
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
	if err == nil {
		r.imp.st.atomics.Add(1)
	} else {
		r.imp.st.errors.Add(1)
	}
	return v, r.revokedDuring(op, err)
}
