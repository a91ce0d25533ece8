package uct

import (
	"github.com/ucxgo/ucx/internal/errs"
	"runtime"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Mem is a UCT memory handle: registered, allocated or attached memory.
type Mem struct {
	res  handle.Resource[memState] // embedded: a Mem is one allocation
	md   *MD
	kind ucs.MemKind
	addr unsafe.Pointer
	size uintptr
}

// memState is what releasing a Mem frees: a registration or attachment
// (and the pin on registered Go memory), or an allocation.
type memState struct {
	md    cgo.MD
	memh  cgo.Memh
	pin   runtime.Pinner
	alloc *cgo.Allocation
}

func releaseMem(s *memState) {
	if s.alloc != nil {
		s.alloc.Free()
		return
	}
	s.md.Deregister(s.memh)
	s.pin.Unpin()
}

func (mem *Mem) collect() { mem.res.Collect() }

// newMem makes the handle of a C object made on m; the caller has set
// State (and pinned through it) before.
func (m *MD) newMem(mem *Mem) *Mem {
	mem.md = m
	mem.res.State.md = m.md
	mem.res.Init(m.res, releaseMem)
	handle.Finalize(mem, (*Mem).collect)
	return mem
}

// Register registers b on the MD. b is pinned until the Mem is closed;
// b must not be empty.
func (m *MD) Register(b []byte, flags MemFlags) (*Mem, error) {
	if len(b) == 0 {
		return nil, errs.New(m.ops().register, ucs.ErrInvalidParam, "empty buffer")
	}
	mem := new(Mem) // the pin lives in the handle
	mem.res.State.pin.Pin(unsafe.SliceData(b))
	if err := m.register(mem, unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)), flags); err != nil {
		mem.res.State.pin.Unpin()
		return nil, err
	}
	return mem, nil
}

// RegisterPointer registers n bytes at p, memory that is not managed by the
// Go runtime (C or mmap'ed memory). The caller keeps it valid until Close.
func (m *MD) RegisterPointer(p unsafe.Pointer, n int, flags MemFlags) (*Mem, error) {
	if p == nil || n <= 0 {
		return nil, errs.New(m.ops().register, ucs.ErrInvalidParam, "nil pointer or a length that is not positive")
	}
	mem := new(Mem)
	if err := m.register(mem, p, uintptr(n), flags); err != nil {
		return nil, err
	}
	return mem, nil
}

func (m *MD) register(mem *Mem, p unsafe.Pointer, n uintptr, flags MemFlags) error {
	op := m.ops().register
	if err := m.enter(op); err != nil {
		return err
	}
	defer m.res.Exit()
	if !m.attr.Flags.Has(FlagReg) {
		return errs.New(op, ucs.ErrUnsupported, "md lacks UCT_MD_FLAG_REG (flags %s)", m.attr.Flags)
	}
	if m.attr.MaxReg != 0 && uint64(n) > m.attr.MaxReg {
		return errs.New(op, ucs.ErrExceedsLimit, "%d bytes: md registers at most %d", n, m.attr.MaxReg)
	}
	memh, st := m.md.Register(p, n, uint64(flags))
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return err
	}
	mem.kind, mem.addr, mem.size = ucs.MemRegistered, p, n
	mem.res.State.memh = memh
	m.newMem(mem)
	return nil
}

// Alloc allocates at least n bytes of host memory with the MD (posix and
// sysv allocate shared memory; they cannot register). Mem.Bytes exposes it.
func (m *MD) Alloc(n int, flags MemFlags) (*Mem, error) {
	op := m.ops().alloc
	if n <= 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "length %d must be positive", n)
	}
	if err := m.enter(op); err != nil {
		return nil, err
	}
	defer m.res.Exit()
	if !m.attr.Flags.Has(FlagAlloc) {
		return nil, errs.New(op, ucs.ErrUnsupported, "md lacks UCT_MD_FLAG_ALLOC (flags %s)", m.attr.Flags)
	}
	if m.attr.MaxAlloc != 0 && uint64(n) > m.attr.MaxAlloc {
		return nil, errs.New(op, ucs.ErrExceedsLimit, "%d bytes: md allocates at most %d", n, m.attr.MaxAlloc)
	}
	a, st := m.md.Alloc(uintptr(n), uint64(flags))
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	mem := &Mem{kind: ucs.MemAllocated, addr: a.Address(), size: a.Length()}
	mem.res.State.memh, mem.res.State.alloc = a.Memh(), a
	return m.newMem(mem), nil
}

// AttachOption configures MD.Attach.
type AttachOption func(*attachOptions)

type attachOptions struct{ hideErrors bool }

// WithHideErrors asks UCX not to log a failed attach
// (UCT_MD_MEM_ATTACH_FLAG_HIDE_ERRORS).
func WithHideErrors() AttachOption { return func(o *attachOptions) { o.hideErrors = true } }

// Attach imports a memory key another process exported with Mem.Export
// (uct_md_mem_attach). The MD must be able to export, and desc must be
// exactly its exported packed size: UCX reads a fixed number of bytes without
// a length, and on MDs that cannot export its attach entry may be a NULL
// pointer, so both are checked here before any byte reaches UCX.
func (m *MD) Attach(desc []byte, opts ...AttachOption) (*Mem, error) {
	var o attachOptions
	for _, opt := range opts {
		opt(&o)
	}
	op := m.ops().attach
	if err := m.enter(op); err != nil {
		return nil, err
	}
	defer m.res.Exit()
	if err := m.exportCapable(op); err != nil {
		return nil, err
	}
	if len(desc) != m.attr.ExportedMkeyPackedSize {
		return nil, errs.New(op, ucs.ErrInvalidParam, "descriptor is %d bytes, md exports %d-byte keys", len(desc), m.attr.ExportedMkeyPackedSize)
	}
	memh, st := m.md.Attach(desc, o.hideErrors)
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	mem := &Mem{kind: ucs.MemImported}
	mem.res.State.memh = memh
	return m.newMem(mem), nil
}

// MD is the memory domain the Mem belongs to.
func (mem *Mem) MD() *MD {
	if mem == nil {
		return nil
	}
	return mem.md
}

// Kind says how the Mem was made.
func (mem *Mem) Kind() ucs.MemKind {
	if mem == nil {
		return 0
	}
	return mem.kind
}

// Len is the length of the memory (0 for attached memory, whose extent
// only the exporter knows).
func (mem *Mem) Len() int {
	if mem == nil {
		return 0
	}
	return int(mem.size)
}

// Address is the memory's first byte in this process (0 for attached
// memory), as ucp's Mem.Address: a virtual address, uint64 in both layers.
func (mem *Mem) Address() uint64 {
	if mem == nil {
		return 0
	}
	return uint64(uintptr(mem.addr))
}

// Bytes is the memory as a slice, valid until Close. Imported memory lives
// in another process and has no bytes here: that is an error.
func (mem *Mem) Bytes() ([]byte, error) {
	op := "uct: bytes of " + mem.Kind().String() + " memory"
	if mem == nil || !mem.res.Enter() {
		return nil, mem.closedErr(op)
	}
	defer mem.res.Exit()
	if mem.kind == ucs.MemImported {
		return nil, errs.New(op, ucs.ErrInvalidAddr, "attached memory belongs to the exporting process")
	}
	return unsafe.Slice((*byte)(mem.addr), mem.size), nil
}

func (mem *Mem) closedErr(op string) error {
	return &ucs.Error{Op: op, Err: ucs.ErrClosed}
}

// PackRemoteKey packs the memory's remote key (uct_md_mkey_pack_v2 without
// flags) into a new slice of the MD's rkey packed size, which is 0 for MDs
// that need no key (self, tcp, cma).
func (mem *Mem) PackRemoteKey() ([]byte, error) {
	return mem.pack(mem.MD().ops().packRkey, false, nil)
}

// Export packs the memory's exported key (uct_md_mkey_pack_v2 with
// UCT_MD_MKEY_PACK_FLAG_EXPORT) for another process to Attach: a new slice
// of exactly the MD's exported packed size. On an MD without
// UCT_MD_FLAG_EXPORTED_MKEY it returns ucs.ErrUnsupported and UCX is not
// called (UCX would "succeed" with meaningless bytes).
func (mem *Mem) Export() ([]byte, error) {
	return mem.pack(mem.MD().ops().export, true, mem.exportCheck)
}

func (mem *Mem) exportCheck() error {
	if err := mem.md.exportCapable(mem.md.ops().export); err != nil {
		return err
	}
	if mem.kind == ucs.MemImported {
		return errs.New(mem.md.ops().export, ucs.ErrInvalidParam, "attached memory cannot be exported again")
	}
	return nil
}

// pack runs one mkey pack; check, when set, vets the call once the handle
// is known to be open.
func (mem *Mem) pack(op string, export bool, check func() error) ([]byte, error) {
	if mem == nil || !mem.res.Enter() {
		return nil, mem.closedErr(op)
	}
	defer mem.res.Exit()
	size := mem.md.attr.RkeyPackedSize
	if export {
		size = mem.md.attr.ExportedMkeyPackedSize
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, err
		}
	}
	out := make([]byte, size)
	overrun, st := mem.md.md.PackMkey(mem.res.State.memh, mem.addr, mem.size, export, out)
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	if overrun {
		return nil, errs.New(op, ucs.ErrBufferTooSmall, "UCX wrote past the md's %d-byte packed size (caught in a guard area)", size)
	}
	return out, nil
}

// Close releases the registration, allocation or attachment. Slices from
// Bytes must not be used after it.
func (mem *Mem) Close() error {
	if mem == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	handle.CloseFinalized(mem, &mem.res)
	return nil
}

// RemoteKey is an unpacked remote key (uct_rkey_unpack).
type RemoteKey struct {
	res handle.Resource[rkeyState] // embedded: a key is one allocation
}

type rkeyState struct {
	comp   cgo.Component
	bundle *cgo.RkeyBundle
}

func releaseRkey(s *rkeyState) { s.comp.ReleaseRkey(s.bundle) }

func (rk *RemoteKey) collect() { rk.res.Collect() }

// UnpackRemoteKey unpacks a key packed by Mem.PackRemoteKey on an MD of the same
// component. Its length must be the MD's rkey packed size; it is checked
// before UCX sees the bytes.
func (m *MD) UnpackRemoteKey(packed []byte) (*RemoteKey, error) {
	op := m.ops().unpack
	if err := m.enter(op); err != nil {
		return nil, err
	}
	defer m.res.Exit()
	if len(packed) != m.attr.RkeyPackedSize {
		return nil, errs.New(op, ucs.ErrInvalidParam, "packed rkey is %d bytes, md packs %d", len(packed), m.attr.RkeyPackedSize)
	}
	if err := checkRkey(op, m.component.Name, packed); err != nil {
		return nil, err
	}
	comp := m.component.c
	b, st := comp.UnpackRemoteKey(packed)
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, err
	}
	rk := &RemoteKey{}
	rk.res.State = rkeyState{comp, b}
	rk.res.Init(m.res, releaseRkey)
	handle.Finalize(rk, (*RemoteKey).collect)
	return rk, nil
}

// Value is the key value UCT transports take, or an error after Close.
func (rk *RemoteKey) Value() (uint64, error) {
	if rk == nil || !rk.res.Enter() {
		return 0, &ucs.Error{Op: "uct: remote key value", Err: ucs.ErrClosed}
	}
	defer rk.res.Exit()
	return rk.res.State.bundle.Rkey(), nil
}

// Close releases the remote key.
func (rk *RemoteKey) Close() error {
	if rk == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	handle.CloseFinalized(rk, &rk.res)
	return nil
}
