package share

import (
	"context"
	"sync"
	"unsafe"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucs"
)

// Buffer is memory an Importer moves bytes into and out of without a
// copy: in rkey mode it is a shared file mapped both here and in the
// session's data path, so Region.ReadAt into (and WriteAt from) a slice of
// Bytes skips the copy through the staging file that any other slice
// costs. In export mode a slice of any memory moves without a copy, and a
// Buffer is plain memory.
//
// Bytes stays valid until Close. Close is refused (ucs.ErrBusy) while a
// call moves bytes through the buffer; after the Importer's Close it only
// unmaps the memory.
type Buffer struct {
	imp *Importer
	f   *datapath.Memfd
	id  uint64 // the data path's name for it (rkey mode)

	mu     sync.Mutex
	refs   int
	closed bool
}

// NewBuffer maps n bytes of memory the session's data path moves bytes
// into and out of directly (rkey mode), zeroed.
func (imp *Importer) NewBuffer(n int) (*Buffer, error) {
	const op = "share: new buffer"
	if n <= 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "length %d: must be positive", n)
	}
	imp.mu.Lock()
	closed := imp.closing
	imp.mu.Unlock()
	if closed {
		return nil, errs.New(op, ucs.ErrClosed, "the importer is closed")
	}
	f, err := datapath.NewMemfd("ucxshare-buffer", n)
	if err != nil {
		return nil, &ucs.Error{Op: op, Err: ucs.ErrNoMemory, Wrapped: err}
	}
	b := &Buffer{imp: imp, f: f}
	if imp.dp == nil {
		return b, nil
	}
	file, err := f.Open(true)
	if err != nil {
		f.Close()
		return nil, &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "reopening the buffer's shared file", Wrapped: err}
	}
	defer file.Close()
	ctx, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
	defer cancel()
	if b.id, err = imp.dp.AddBuffer(ctx, file, f.Size()); err != nil {
		f.Close()
		return nil, &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "the session's data path did not take the buffer", Wrapped: err}
	}
	imp.bufMu.Lock()
	imp.buffers = append(imp.buffers, b)
	imp.bufMu.Unlock()
	return b, nil
}

// Bytes is the buffer's memory (nil after Close).
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	return b.f.Bytes()
}

// Len is the length of Bytes (0 after Close).
func (b *Buffer) Len() int { return len(b.Bytes()) }

// Close unmaps the buffer here and in the data path. It is refused with an
// error wrapping ucs.ErrBusy while a call moves bytes through it; closing
// twice returns nil.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if b.refs > 0 {
		return errs.New("share: close buffer", ucs.ErrBusy, "%d call(s) move bytes through the buffer", b.refs)
	}
	b.closed = true
	imp := b.imp
	imp.bufMu.Lock()
	for i, x := range imp.buffers {
		if x == b {
			imp.buffers = append(imp.buffers[:i], imp.buffers[i+1:]...)
			break
		}
	}
	imp.bufMu.Unlock()
	if b.id != 0 {
		// The data path may have ended (the session's end): its mapping
		// went with it.
		ctx, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
		imp.dp.DropBuffer(ctx, b.id)
		cancel()
	}
	return b.f.Close()
}

// bufferOf is the open Buffer whose memory holds all of p, held for one
// call (release it), and p's offset in it; nil when there is none.
func (imp *Importer) bufferOf(p []byte) (*Buffer, int) {
	if len(p) == 0 {
		return nil, 0
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	hi := lo + uintptr(len(p))
	imp.bufMu.Lock()
	defer imp.bufMu.Unlock()
	for _, b := range imp.buffers {
		m := b.f.Bytes()
		base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
		if lo >= base && hi <= base+uintptr(len(m)) {
			b.mu.Lock()
			ok := !b.closed
			if ok {
				b.refs++
			}
			b.mu.Unlock()
			if ok {
				return b, int(lo - base)
			}
		}
	}
	return nil, 0
}

func (b *Buffer) release() {
	b.mu.Lock()
	b.refs--
	b.mu.Unlock()
}
