package share

import (
	"sync"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucs"
)

// Memory is memory an Exporter can share: an anonymous shared file
// (memfd) mapped in this process. In rkey mode each importer's data path
// is a process of its own that maps only the regions granted to that
// importer, read-only where the grant is, and unmaps a region when it is
// revoked; Go memory could not be mapped there, so regions are Memory.
//
// Bytes is the memory to fill and read. A Memory shared by an exporter
// (Exporter.Add) stays mapped until Close, which is refused while the
// region is shared (ucs.ErrBusy): Remove it, or Close the exporter, first.
type Memory struct {
	mu     sync.Mutex
	f      *datapath.Memfd
	shared int // regions of exporters that share it now
}

// NewMemory maps n bytes of shareable memory, zeroed. The mapping is a
// whole number of pages; Bytes is n bytes of it, and only they are
// granted.
func NewMemory(n int) (*Memory, error) {
	const op = "share: new memory"
	if n <= 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "length %d: must be positive", n)
	}
	f, err := datapath.NewMemfd("ucxshare", n)
	if err != nil {
		return nil, &ucs.Error{Op: op, Err: ucs.ErrNoMemory, Wrapped: err}
	}
	return &Memory{f: f}, nil
}

// Bytes is the memory (nil after Close).
func (m *Memory) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return nil
	}
	return m.f.Bytes()
}

// Len is the length of Bytes (0 after Close).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return 0
	}
	return len(m.f.Bytes())
}

// Close unmaps the memory. While an exporter shares it, Close is refused
// with an error wrapping ucs.ErrBusy. Closing twice returns nil.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return nil
	}
	if m.shared > 0 {
		return errs.New("share: close memory", ucs.ErrBusy, "the memory is shared as %d region(s): Remove them, or Close the exporter, first", m.shared)
	}
	err := m.f.Close()
	m.f = nil
	return err
}

// hold marks the memory shared by one more region; false after Close.
func (m *Memory) hold() (*datapath.Memfd, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return nil, false
	}
	m.shared++
	return m.f, true
}

func (m *Memory) release() {
	m.mu.Lock()
	m.shared--
	m.mu.Unlock()
}
