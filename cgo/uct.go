package cgo

/*
#include "ucxgo/shim.h"

// ucxgo_rkey_try unpacks a copy and releases it before returning: the key
// may live on the Go stack.
#cgo noescape ucxgo_rkey_try
#cgo nocallback ucxgo_rkey_try
*/
import "C"

import (
	"strings"
	"unsafe"
)

// Component is a UCT component handle; components are static in libuct and
// are never freed.
type Component struct{ p C.uct_component_h }

// MD is an open UCT memory domain.
type MD struct{ p C.uct_md_h }

// Memh is a UCT memory handle.
type Memh struct{ p C.uct_mem_h }

// IsNil reports whether h is the null handle.
func (h Memh) IsNil() bool { return h.p == nil }

// ComponentInfo describes a component and its memory-domain resources.
type ComponentInfo struct {
	Name    string
	Flags   uint64
	MDNames []string
}

// Components lists libuct's components.
func Components() ([]Component, Status) {
	var list *C.uct_component_h
	var n C.unsigned
	if st := Status(C.ucxgo_components(&list, &n)); st != 0 {
		return nil, st
	}
	defer C.uct_release_component_list(list)
	out := make([]Component, int(n))
	for i, c := range unsafe.Slice(list, int(n)) {
		out[i] = Component{c}
	}
	return out, 0
}

// Query describes c.
func (c Component) Query() (ComponentInfo, Status) {
	var info C.ucxgo_component_info_t
	if st := Status(C.ucxgo_component_query(c.p, &info)); st != 0 {
		return ComponentInfo{}, st
	}
	out := ComponentInfo{Name: C.GoString(&info.name[0]), Flags: uint64(info.flags)}
	n := min(int(info.md_count), C.UCXGO_MAX_MDS_PER_COMPONENT)
	for i := range n {
		out.MDNames = append(out.MDNames, C.GoString(&info.md_names[i][0]))
	}
	return out, 0
}

// OpenMD opens memory domain name of c, after applying the config
// modifications kv (key, value, key, value, ...). On a failed modification,
// failed is the index of its pair.
func (c Component) OpenMD(name string, kv []string) (md MD, failed int, st Status) {
	var buf strings.Builder
	for _, s := range kv {
		buf.WriteString(s)
		buf.WriteByte(0)
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	ckv := C.CString(buf.String())
	defer C.free(unsafe.Pointer(ckv))
	var failedC C.unsigned
	st = Status(C.ucxgo_md_open(c.p, cname, ckv, C.unsigned(len(kv)/2), &md.p, &failedC))
	return md, int(failedC), st
}

// Close closes md and clears it: a later use of it is a nil dereference,
// not a use after free.
func (md *MD) Close() { C.uct_md_close(md.p); md.p = nil }

// MDAttr is the version-independent copy of an MD's attributes.
type MDAttr struct {
	MaxAlloc, MaxReg, Flags                              uint64
	RegMemTypes, RegNonblockMemTypes, CacheMemTypes      uint64
	GVAMemTypes, DetectMemTypes, AllocMemTypes           uint64
	AccessMemTypes, DMABufMemTypes                       uint64
	RegCostFixed, RegCostPerByte                         float64
	RkeyPackedSize, ExportedMkeyPackedSize, RegAlignment uint64
	RequiredMemFlags                                     uint64
	LocalCPUs                                            [16]uint64
	ComponentName                                        string
	GlobalID                                             [256]byte
}

func attrFromC(a *C.ucxgo_md_attr_t) MDAttr {
	out := MDAttr{
		MaxAlloc: uint64(a.max_alloc), MaxReg: uint64(a.max_reg), Flags: uint64(a.flags),
		RegMemTypes: uint64(a.reg_mem_types), RegNonblockMemTypes: uint64(a.reg_nonblock_mem_types),
		CacheMemTypes: uint64(a.cache_mem_types), GVAMemTypes: uint64(a.gva_mem_types),
		DetectMemTypes: uint64(a.detect_mem_types), AllocMemTypes: uint64(a.alloc_mem_types),
		AccessMemTypes: uint64(a.access_mem_types), DMABufMemTypes: uint64(a.dmabuf_mem_types),
		RegCostFixed: float64(a.reg_cost.c), RegCostPerByte: float64(a.reg_cost.m),
		RkeyPackedSize: uint64(a.rkey_packed_size), ExportedMkeyPackedSize: uint64(a.exported_mkey_packed_size),
		RegAlignment: uint64(a.reg_alignment), RequiredMemFlags: uint64(a.required_mem_flags),
		ComponentName: C.GoString(&a.component_name[0]),
	}
	for i := range out.LocalCPUs {
		out.LocalCPUs[i] = uint64(a.local_cpus.ucs_bits[i])
	}
	for i := range out.GlobalID {
		out.GlobalID[i] = byte(a.global_id[i])
	}
	return out
}

// Query returns md's attributes through uct_md_query_v2 (every field).
func (md MD) Query() (MDAttr, Status) {
	var a C.ucxgo_md_attr_t
	if st := Status(C.ucxgo_md_query(md.p, &a)); st != 0 {
		return MDAttr{}, st
	}
	return attrFromC(&a), 0
}

// QueryV1 returns the attributes the installed v1 uct_md_query reports
// (the fields it has; the others stay zero).
func (md MD) QueryV1() (MDAttr, Status) {
	var a C.ucxgo_md_attr_t
	if st := Status(C.ucxgo_md_query_v1(md.p, &a)); st != 0 {
		return MDAttr{}, st
	}
	return attrFromC(&a), 0
}

// FieldLayout is where the loaded release puts one uct_md_attr_v2_t field.
type FieldLayout struct {
	Bit          uint64
	Offset, Size uintptr
	Name         string
}

// AttrV2Layout is the uct_md_attr_v2_t layout the shims use for the loaded
// release: its size and fields.
func AttrV2Layout() (size uintptr, fields []FieldLayout) {
	abi := C.ucxgo_abi()
	for _, f := range unsafe.Slice(abi.md_attr_fields, int(abi.md_attr_nfields)) {
		fields = append(fields, FieldLayout{uint64(f.bit), uintptr(f.offset), uintptr(f.size), C.GoString(f.name)})
	}
	return uintptr(abi.md_attr_size), fields
}

// QueryRaw runs uct_md_query_v2 with fieldMask into buf, which must be at
// least the layout's size; it is for the ABI self-test.
func (md MD) QueryRaw(fieldMask uint64, buf []byte) Status {
	if uintptr(len(buf)) < uintptr(C.ucxgo_abi().md_attr_size) {
		panic("cgo: QueryRaw buffer smaller than uct_md_attr_v2_t")
	}
	return Status(C.ucxgo_md_query_raw(md.p, C.uint64_t(fieldMask), bytesPtr(buf)))
}

// Register registers [p, p+n) on md. Go memory must be pinned by the caller
// for as long as the registration lives.
func (md MD) Register(p unsafe.Pointer, n uintptr, flags uint64) (Memh, Status) {
	r := C.ucxgo_mem_reg(md.p, p, C.size_t(n), C.uint64_t(flags))
	return Memh{C.uct_mem_h(r.handle)}, Status(r.status)
}

// Deregister undoes Register or Attach.
func (md MD) Deregister(h Memh) Status {
	return Status(C.ucxgo_mem_dereg(md.p, h.p))
}

// Allocation is memory an MD allocated (uct_allocated_memory_t, with room
// for the larger struct of a newer library).
type Allocation struct{ c C.ucxgo_allocated_memory_t }

// Address is the first byte of the allocation.
func (a *Allocation) Address() unsafe.Pointer { return a.c.mem.address }

// Length is the allocated length, which may exceed the requested one.
func (a *Allocation) Length() uintptr { return uintptr(a.c.mem.length) }

// Memh is the MD's handle of the allocation.
func (a *Allocation) Memh() Memh { return Memh{a.c.mem.memh} }

// Alloc allocates n bytes of host memory with md.
func (md MD) Alloc(n uintptr, flags uint64) (*Allocation, Status) {
	a := new(Allocation)
	if st := Status(C.ucxgo_mem_alloc(md.p, C.size_t(n), C.unsigned(flags), &a.c)); st != 0 {
		return nil, st
	}
	return a, 0
}

// Free releases an allocation.
func (a *Allocation) Free() Status { return Status(C.ucxgo_mem_free(&a.c)) }

// PackMkey packs h's rkey (export false) or exported mkey (export true) into
// out, which must be the MD's packed size. overrun reports that UCX wrote
// past len(out); the bytes were caught in a guard area, out holds the prefix.
func (md MD) PackMkey(h Memh, addr unsafe.Pointer, n uintptr, export bool, out []byte) (overrun bool, st Status) {
	r := C.ucxgo_mkey_pack(md.p, h.p, addr, C.size_t(n), boolInt(export), bytesPtr(out), C.size_t(len(out)))
	return r.flag != 0, Status(r.status)
}

// PackMkeyV1 packs h's rkey through the installed v1 uct_md_mkey_pack; it
// is for the ABI self-test, which compares it with PackMkey.
func (md MD) PackMkeyV1(h Memh, out []byte) (overrun bool, st Status) {
	var ov C.int
	st = Status(C.ucxgo_mkey_pack_v1(md.p, h.p, bytesPtr(out), C.size_t(len(out)), &ov))
	return ov != 0, st
}

// Attach imports an exported mkey (uct_md_mem_attach). The caller has
// checked that md can export and that len(buf) is its exported packed size.
func (md MD) Attach(buf []byte, hideErrors bool) (Memh, Status) {
	var h Memh
	var hide C.int
	if hideErrors {
		hide = 1
	}
	st := Status(C.ucxgo_mem_attach(md.p, bytesPtr(buf), C.size_t(len(buf)), hide, &h.p))
	return h, st
}

// RkeyBundle is an unpacked UCT remote key.
type RkeyBundle struct{ c C.uct_rkey_bundle_t }

// Rkey is the key value transports use.
func (b *RkeyBundle) Rkey() uint64 { return uint64(b.c.rkey) }

// UnpackRemoteKey unpacks a packed rkey of c's MDs.
func (c Component) UnpackRemoteKey(buf []byte) (*RkeyBundle, Status) {
	b := new(RkeyBundle)
	if st := Status(C.ucxgo_rkey_unpack(c.p, bytesPtr(buf), C.size_t(len(buf)), &b.c)); st != 0 {
		return nil, st
	}
	return b, 0
}

// TryRemoteKey unpacks buf as c's rkey and releases it at once, for the
// unpack's status.
func (c Component) TryRemoteKey(buf []byte) Status {
	return Status(C.ucxgo_rkey_try(c.p, bytesPtr(buf), C.size_t(len(buf))))
}

// ReleaseRkey releases an unpacked rkey.
func (c Component) ReleaseRkey(b *RkeyBundle) Status {
	return Status(C.ucxgo_rkey_release(c.p, &b.c))
}
