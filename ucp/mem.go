package ucp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Prot are memory protection flags (UCP_MEM_MAP_PROT_*).
type Prot uint

// Protection flags.
const (
	ProtLocalRead   Prot = 0x1
	ProtLocalWrite  Prot = 0x2
	ProtRemoteRead  Prot = 0x100
	ProtRemoteWrite Prot = 0x200
	ProtAll              = ProtLocalRead | ProtLocalWrite | ProtRemoteRead | ProtRemoteWrite
)

// MapOption configures Allocate, Register, RegisterPointer and Import.
type MapOption func(*mapOptions)

type mapOptions struct {
	prot    Prot
	memType ucs.MemoryType
}

// WithProt sets the protection (default ProtAll).
func WithProt(p Prot) MapOption {
	return func(o *mapOptions) { o.prot = p }
}

// WithMemoryType sets the memory type (default host); one the loaded UCX
// release does not have is refused with ucs.ErrInvalidParam.
func WithMemoryType(t ucs.MemoryType) MapOption {
	return func(o *mapOptions) { o.memType = t }
}

// enter is res.Enter for a mapping passed to op, which may be nil.
func (m *Mem) enter(op string) error {
	if m == nil {
		return errs.New(op, ucs.ErrInvalidParam, "nil memory mapping")
	}
	if !m.res.Enter() {
		return closedError(op)
	}
	return nil
}

// Mem is a UCP memory mapping (ucp_mem_h).
type Mem struct {
	res  handle.Resource[memState] // embedded: a mapping is one allocation
	ctx  *Context
	kind ucs.MemKind
	addr unsafe.Pointer
	n    uintptr
	desc *Descriptor

	// Sizes of the last packs, so that the next one allocates exactly once.
	rkeyLen, exportLen atomic.Int32
}

// memState is what unmapping needs: the mapping and the pin on registered
// Go memory.
type memState struct {
	c   cgo.Context
	h   cgo.MemHandle
	pin runtime.Pinner
	// exposed: a key or descriptor of it was handed out; Close then leaves
	// the unmap to the context's release (its quarantine of retired maps).
	exposed  atomic.Bool
	retired  *retiredMaps
	n        int         // length, for the quarantine's budget
	imported *liveImport // an imported mapping's entry in its context's liveImports
}

func releaseMem(s *memState) {
	if s.exposed.Load() {
		s.retired.add(s)
		return
	}
	unmap(s.c, s.h, &s.pin, s.imported)
}

// unmap is the one place a mapping is unmapped and unpinned.
func unmap(c cgo.Context, h cgo.MemHandle, pin *runtime.Pinner, imported *liveImport) {
	c.MemUnmap(h)
	pin.Unpin()
	imported.unmapped()
}

// retiredMaps are the mappings whose key or descriptor was handed out,
// closed but not yet unmapped: UCX cannot revoke a key, and a peer's put or
// get served after the unmap made this process crash (SIGSEGV in the
// serving worker's progress, UCX 1.18.1, in the close-order test's orders
// that closed such a mapping before its peer's endpoint). They are
// unmapped, and unpinned, oldest first once they hold more than the
// context's quarantine (WithUnmapQuarantine), and all when the context is
// released (its workers are gone then, and nothing serves a peer).
type retiredMaps struct {
	mu     sync.Mutex
	c      cgo.Context
	maps   []retiredMap
	bytes  int
	budget int
	done   bool // the context was released
}

type retiredMap struct {
	h        cgo.MemHandle
	pin      runtime.Pinner
	n        int
	imported *liveImport
}

func (r *retiredMaps) add(s *memState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done { // cannot happen: a mapping holds its context
		return
	}
	r.maps = append(r.maps, retiredMap{s.h, s.pin, s.n, s.imported})
	r.bytes += s.n
	for r.bytes > r.budget && len(r.maps) > 0 {
		old := &r.maps[0]
		unmap(r.c, old.h, &old.pin, old.imported)
		r.bytes -= old.n
		r.maps[0] = retiredMap{}
		r.maps = r.maps[1:]
	}
}

// unmapAll runs in the context's release.
func (r *retiredMaps) unmapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.maps {
		unmap(r.c, r.maps[i].h, &r.maps[i].pin, r.maps[i].imported)
	}
	r.maps, r.bytes, r.done = nil, 0, true
}

func (m *Mem) collect() { m.res.Collect() }

// Allocate has UCX allocate and register n bytes (n may be 0), for RMA.
// UCX may map more than n (a whole number of pages, for shared memory):
// Len is the length mapped, and a packed region offers all of it. An n
// larger than this machine's memory is refused with ucs.ErrNoMemory.
func (c *Context) Allocate(n int, opts ...MapOption) (*Mem, error) {
	return c.memMap("ucp: map allocated memory", ucs.MemAllocated, n, nil, nil, nil, opts)
}

// Register registers b for RMA; b stays pinned until the mapping is closed.
func (c *Context) Register(b []byte, opts ...MapOption) (*Mem, error) {
	return c.memMap("ucp: map registered memory", ucs.MemRegistered, len(b), unsafe.Pointer(unsafe.SliceData(b)), b, nil, opts)
}

// RegisterPointer registers n bytes at p, memory not managed by the Go
// runtime (mmap, C); the caller keeps it valid until the mapping is closed.
func (c *Context) RegisterPointer(p unsafe.Pointer, n int, opts ...MapOption) (*Mem, error) {
	return c.memMap("ucp: map registered memory", ucs.MemRegistered, n, p, nil, nil, opts)
}

// Import maps memory another process exported (Mem.Export), from the
// descriptor ParseDescriptor returned: UCX gets the bytes ParseDescriptor
// validated, after a check against this machine's memory domains. RMA and
// local operations then use the mapping as the exporter's memory. A range
// that overlaps one imported from the same exporter under another
// registration id, and not yet unmapped here, is refused (ucs.ErrBusy):
// UCX aborts the process on it (docs/behaviour.md, "UCX hazards the API prevents").
func (c *Context) Import(d *Descriptor, opts ...MapOption) (*Mem, error) {
	const op = "ucp: map imported memory"
	if d == nil || d.raw == nil {
		return nil, errs.New(op, ucs.ErrInvalidParam, "the descriptor was not made by ParseDescriptor")
	}
	if err := c.checkImportable(d); err != nil {
		return nil, err
	}
	return c.memMap(op, ucs.MemImported, 0, nil, nil, d, opts)
}

func (c *Context) memMap(op string, kind ucs.MemKind, n int, p unsafe.Pointer, pinned []byte, desc *Descriptor, opts []MapOption) (*Mem, error) {
	o := mapOptions{prot: ProtAll, memType: ucs.MemoryHost}
	if len(opts) > 0 { // on the heap only when there are options to apply
		po := &mapOptions{}
		*po = o
		for _, opt := range opts {
			opt(po)
		}
		o = *po
	}
	if n < 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "negative length")
	}
	if !o.memType.KnownByLoaded() {
		return nil, errs.New(op, ucs.ErrInvalidParam, "memory type %s is not one of UCX %s's", o.memType, ucs.LoadedVersion())
	}
	if o.prot&^ProtAll != 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "protection %#x has bits no Prot constant has", uint(o.prot))
	}
	if kind == ucs.MemAllocated && physicalMemory() > 0 && uint64(n) > physicalMemory() {
		// UCX's posix allocator filled /dev/shm with a length of 1<<62
		// until the kernel killed the process.
		return nil, errs.New(op, ucs.ErrNoMemory, fmt.Sprintf("%d bytes is more than this machine's memory (%d bytes)", n, physicalMemory()))
	}
	if kind == ucs.MemRegistered && n == 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "empty buffer")
	}
	if kind == ucs.MemRegistered && p == nil {
		return nil, errs.New(op, ucs.ErrInvalidParam, "nil pointer")
	}
	if !c.enter() {
		return nil, closedError(op)
	}
	defer c.res.Exit()
	if desc != nil && !desc.dummy {
		c.imports.mu.Lock()
		defer c.imports.mu.Unlock()
		if i := c.imports.conflict(desc); i != nil {
			return nil, importConflictError(op, desc, i)
		}
	}

	// The Mem is allocated first so that the pin lives in it: a mapping is
	// one allocation.
	m := &Mem{ctx: c, kind: kind, desc: desc}
	if pinned != nil {
		m.res.State.pin.Pin(p)
	}
	var raw []byte
	if desc != nil {
		raw = desc.raw
	}
	h, base, size, st := c.c.MemMap(p, uintptr(n), kind == ucs.MemAllocated, uint(o.prot), int(o.memType), raw)
	if st != 0 {
		m.res.State.pin.Unpin()
		e := &ucs.Error{Op: op, Err: ucs.Status(st)}
		if kind == ucs.MemImported && ucs.Status(st) == ucs.ErrUnreachable {
			e.Reason = "no local memory domain matches the descriptor's (no matching MD)"
		}
		if kind == ucs.MemAllocated && ucs.Status(st) == ucs.ErrNoMemory {
			// Measured on 1.18.1: TLS tcp with ALLOC_PRIO md:posix.
			e.Reason = "or no allocator of ALLOC_PRIO is loaded: UCX says out of memory also when the memory domains it names are not in use under UCX_TLS"
		}
		return nil, e
	}
	m.addr, m.n = base, size
	m.res.State.c, m.res.State.h, m.res.State.retired, m.res.State.n = c.c, h, c.retired, int(size)
	if desc != nil && !desc.dummy {
		m.res.State.imported = c.imports.add(desc)
	}
	m.res.Init(c.res, releaseMem)
	handle.Finalize(m, (*Mem).collect)
	return m, nil
}

// Kind says where the memory comes from.
func (m *Mem) Kind() ucs.MemKind {
	if m == nil {
		return 0
	}
	return m.kind
}

// Address is the memory's address: in this process, or for imported memory
// in the exporter's (where RMA on it lands).
func (m *Mem) Address() uint64 {
	if m == nil {
		return 0
	}
	return uint64(uintptr(m.addr))
}

// Len is the mapping's length.
func (m *Mem) Len() int {
	if m == nil {
		return 0
	}
	return int(m.n)
}

// Descriptor is the descriptor an imported mapping was made from, which
// cannot change (nil for other mappings).
func (m *Mem) Descriptor() *Descriptor {
	if m == nil {
		return nil
	}
	return m.desc
}

// Bytes is the memory as a slice, valid until Close. Imported memory lives
// in another process: asking for its bytes is an error.
func (m *Mem) Bytes() ([]byte, error) {
	const op = "ucp: bytes of mapped memory"
	if m == nil || !m.res.Enter() {
		return nil, closedError(op)
	}
	defer m.res.Exit()
	return m.bytes(op)
}

// bytes is Bytes for callers inside Enter.
func (m *Mem) bytes(op string) ([]byte, error) {
	if m.kind == ucs.MemImported {
		return nil, errs.New(op, ucs.ErrInvalidAddr, "imported memory belongs to the exporting process; use RMA or local operations with this mapping as memh")
	}
	if m.n == 0 {
		return []byte{}, nil
	}
	return unsafe.Slice((*byte)(m.addr), m.n), nil
}

// Export packs the mapping for another process to Import (ucp_memh_pack
// with UCP_MEMH_PACK_FLAG_EXPORT); the result is a Go-owned copy and UCX's
// buffer is released at once. Where no memory domain of the mapping can
// export it is ucs.ErrUnsupported, whatever the mapping's length: a
// zero-length mapping, which UCX maps on no memory domain, is refused so
// unless a memory domain on this machine can export, and otherwise exports
// UCX's 3-byte dummy descriptor (which ParseDescriptor and Import take).
// So a caller that falls back to PackRegion or PackRemoteKey on
// ucs.ErrUnsupported does so for every length. (Without the EXPORT flag
// ucp_memh_pack aborts the process; this binding never issues that call.)
func (m *Mem) Export() ([]byte, error) { return m.AppendExport(nil) }

// AppendExport is Export appending the descriptor to dst, which allocates
// nothing when dst has room.
func (m *Mem) AppendExport(dst []byte) ([]byte, error) {
	const op = "ucp: export memory handle"
	if m == nil || !m.res.Enter() {
		return dst, closedError(op)
	}
	defer m.res.Exit()
	if m.kind == ucs.MemImported {
		return dst, errs.New(op, ucs.ErrInvalidParam, "imported memory cannot be exported again")
	}
	if noExporterHere() {
		return dst, errExportUnsupported // UCX's answer, without asking it
	}
	if m.n == 0 && !canExportHere() {
		// UCX answers any zero-length mapping with its dummy, capable
		// memory domain or not.
		return dst, errExportUnsupported
	}
	b, n, st := m.ctx.c.AppendExport(dst, int(m.exportLen.Load()), m.res.State.h)
	if st == 0 {
		m.exportLen.Store(int32(n))
	}
	if ucs.Status(st) == ucs.ErrUnsupported {
		return dst, errExportUnsupported
	}
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return dst, err
	}
	m.res.State.exposed.Store(true)
	return b, nil
}

// errExportUnsupported is shared: the unsupported answer is the common one
// on machines without export-capable hardware, and errors are immutable.
var errExportUnsupported = errs.New("ucp: export memory handle", ucs.ErrUnsupported, "no memory domain of the mapping has UCT_MD_FLAG_EXPORTED_MKEY")

// PackRemoteKey packs the mapping's remote key (ucp_rkey_pack) for a peer's
// Endpoint.UnpackRemoteKey.
func (m *Mem) PackRemoteKey() ([]byte, error) { return m.AppendRemoteKey(nil) }

// AppendRemoteKey is PackRemoteKey appending the key to dst, which allocates nothing
// when dst has room.
func (m *Mem) AppendRemoteKey(dst []byte) ([]byte, error) { return m.appendRemoteKey(dst, true) }

// appendRemoteKey is AppendRemoteKey; handedOut false packs a key that
// never leaves this process (a LocalRegion's, whose Close ends its every
// use), which leaves the mapping's Close free to unmap at once.
func (m *Mem) appendRemoteKey(dst []byte, handedOut bool) ([]byte, error) {
	const op = "ucp: pack rkey"
	if m == nil || !m.res.Enter() {
		return dst, closedError(op)
	}
	defer m.res.Exit()
	b, n, st := m.ctx.c.AppendRemoteKey(dst, int(m.rkeyLen.Load()), m.res.State.h)
	if st == 0 {
		m.rkeyLen.Store(int32(n))
	}
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return dst, err
	}
	if handedOut {
		m.res.State.exposed.Store(true)
	}
	return b, nil
}

// Close unmaps the memory once no operation in flight uses it, except that
// a mapping whose key or descriptor was handed out (PackRemoteKey,
// PackRegion, AppendRemoteKey, Export) keeps its memory, pin and
// registration in its context's quarantine
// (WithUnmapQuarantine, default DefaultUnmapQuarantine bytes, oldest
// unmapped first) or until the context is released: UCX cannot revoke a
// key, and a peer's put or get served from unmapped memory would crash this
// process. A LocalRegion's key does not count (it never leaves the
// process): the mapping stays until the region is closed, then unmaps.
// Slices from Bytes must not be used after Close.
func (m *Mem) Close() error {
	if m == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	handle.CloseFinalized(m, &m.res)
	return nil
}

// span checks [off, off+n) against the mapping and returns its address.
func (m *Mem) span(op string, off, n int) (unsafe.Pointer, error) {
	if off < 0 || n < 0 || uint64(off)+uint64(n) > uint64(m.n) {
		return nil, errs.New(op, ucs.ErrOutOfRange, "%d bytes at offset %d do not fit a %d-byte mapping", n, off, m.n)
	}
	return unsafe.Add(m.addr, off), nil
}

// RemoteKey is a peer's unpacked remote key, for RMA on the endpoint it
// was unpacked on only (UCX applies a key's lanes to any endpoint
// unchecked, so other endpoints refuse it). It keeps that endpoint's worker
// alive, not the endpoint: UCX keeps keys in the worker's pool
// (ucp_rkey_destroy touches no endpoint), so an endpoint's close never
// waits for keys, and an operation in flight that holds a key cannot keep a
// force-closed endpoint from ending it. UCX's documentation asks for keys
// to be destroyed before their endpoint; the binding allows either order.
type RemoteKey struct {
	// Its own allocation, not embedded: a request in flight holds it, and
	// through an embedded one would hold the RemoteKey, its Endpoint and
	// that endpoint's Worker, whose cleanup then never ran (a worker
	// dropped with a request in flight was never released).
	res *handle.Resource[rkeyState]
	ep  *Endpoint // for Region; holds no UCX reference

	// The peer's mapping, for a key from UnpackRegion (set before the key
	// is returned, read-only after).
	bounded bool
	base    uint64
	n       int
}

// rkeyState holds the worker's state, not the Worker: a request abandoned
// to a worker holds the key, and must not keep the Worker reachable.
type rkeyState struct {
	w  *handle.Resource[engine]
	ep uint64 // the endpoint it was unpacked on (Endpoint.id)
	c  cgo.Rkey
	// retired: Close was called; set and read under the worker's lock
	// (engine.retireKey, engine.atomicOp).
	retired bool
}

func releaseRkey(s *rkeyState) {
	s.w.State.destroyRkey(&s.c)
}

func (rk *RemoteKey) collect() { rk.res.Collect() }

// UnpackRemoteKey unpacks a key packed by the peer's Mem.PackRemoteKey. On an
// endpoint made by Connect or ConnRequest.Accept whose wire-up has not been
// seen to finish (no Flush has completed on it), it first flushes the
// endpoint, waiting within ctx: UCX binds a key to the endpoint's
// configuration of the moment, and a key unpacked before wire-up changes
// that configuration can make UCX abort the process at the first put or
// get (docs/behaviour.md).
//
// The bytes are checked in Go before UCX reads them, and a part whose
// shared-memory reader would fail to attach what it names is dropped (on
// some releases such a failure crashes UCX; the endpoint asks UCX which
// reader each part meets, see "Not guaranteed" in docs/behaviour.md for the
// machines where it cannot). A bare UCX key has no checksum, so damage
// that still parses can point the key at other memory; keys from this
// binding travel safer as packed regions (Mem.PackRegion, UnpackRegion),
// which carry one.
func (ep *Endpoint) UnpackRemoteKey(ctx context.Context, packed []byte) (*RemoteKey, error) {
	const op = "ucp: unpack rkey"
	if len(packed) == 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "empty rkey")
	}
	if ep == nil || ep.res == nil {
		return nil, closedError(op) // a nil or zero Endpoint
	}
	if ep.wiring.Load() {
		if err := ep.Flush(ctx); err != nil {
			return nil, wireupError(op, err)
		}
	}
	if err := ep.enter(op); err != nil {
		return nil, err
	}
	defer ep.res.Exit()
	readers, err := ep.readersFor(packed)
	if err != nil {
		return nil, err
	}
	var scratch [rkeyScratchSize]byte
	padded, err := checkRkey(scratch[:0], packed, &readers)
	if err != nil {
		return nil, err
	}
	c, st := ep.w.unpackRkey(ep.c, padded)
	if err := errs.Status(ucs.Status(st), op); err != nil {
		return nil, explainRkeyRefusal(err, packed)
	}
	rk := &RemoteKey{ep: ep}
	rk.res = handle.New(ep.w.res, releaseRkey, rkeyState{w: ep.w.res, ep: ep.id, c: c})
	handle.Finalize(rk, (*RemoteKey).collect)
	return rk, nil
}

// wireupError is the failed flush of UnpackRemoteKey's wait for wire-up,
// under the unpack's name.
func wireupError(op string, err error) error {
	e := &ucs.Error{Op: op, Err: err, Reason: "waiting for the endpoint's wire-up to finish (the peer's worker must be progressed meanwhile)"}
	var fe *ucs.Error
	if errors.As(err, &fe) {
		e.Err, e.Wrapped = fe.Err, fe.Wrapped
	}
	return e
}

// Close destroys the remote key once no operation in flight uses it.
func (rk *RemoteKey) Close() error {
	if rk == nil || rk.res == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	// Retired before the owner's reference goes: the atomics check the key
	// under the worker's lock instead of entering it (engine.atomicOp).
	rk.res.State.w.State.retireKey(&rk.res.State)
	handle.CloseFinalized(rk, rk.res)
	return nil
}
