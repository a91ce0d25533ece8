package ucp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/ucxgo/ucx/internal/errs"
	"math/bits"
	"sync"

	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// The exported-memh wire format of UCX 1.15 and later (ucp_memh_exported_pack):
// host-order integers, no magic and no total length. UCX parses it without
// a length and asserts (aborting the process) on malformed input, so every
// byte from another process is checked here first.
const (
	descHeaderSize  = 44 // packers always write 43 = size-1 in the first byte
	descFlagExport  = 0x1
	descDummySize   = 3   // the zero-length mapping's descriptor: 00 00 00
	maxGlobalIDSize = 256 // UCT_MD_GLOBAL_ID_MAX
)

// Exported-mkey payload sizes every supported (1.16+) importer understands: u32 lkey + u16
// vhca_id (1.16–1.18), plus a u64 MD uuid (1.19+). The 1.14–1.15 encoding
// (20 bytes) is not compatible and is refused.
var validMkeySizes = map[int]bool{6: true, 14: true}

// Descriptor is a parsed exported memory handle, made by ParseDescriptor
// and immutable: its methods report what was parsed, and Context.Import
// checks exactly that and hands UCX exactly the bytes it was parsed from.
// The zero Descriptor is not one ParseDescriptor made; Import refuses it.
// The methods of a nil Descriptor report zero values.
type Descriptor struct {
	dummy       bool
	flags       uint16
	mdMap       uint64
	memType     ucs.MemoryType
	address     uint64
	length      uint64
	contextUUID uint64
	regID       uint64
	mds         []DescriptorMD // one per bit of mdMap, ascending; never handed out

	raw []byte // the validated wire form, a copy: what Context.Import hands UCX
}

// Dummy reports whether d is the zero-length mapping's 3-byte descriptor,
// which has no memory domains (its other methods report zero values).
func (d *Descriptor) Dummy() bool {
	if d == nil {
		return false
	}
	return d.dummy
}

// Flags are the descriptor's flags (bit 0: exported).
func (d *Descriptor) Flags() uint16 {
	if d == nil {
		return 0
	}
	return d.flags
}

// MDMap is the set of the exporter's memory-domain indices.
func (d *Descriptor) MDMap() uint64 {
	if d == nil {
		return 0
	}
	return d.mdMap
}

// MemoryType is the exporter's memory type.
func (d *Descriptor) MemoryType() ucs.MemoryType {
	if d == nil {
		return 0
	}
	return d.memType
}

// Address is the region's address in the exporter.
func (d *Descriptor) Address() uint64 {
	if d == nil {
		return 0
	}
	return d.address
}

// Length is the region's length.
func (d *Descriptor) Length() uint64 {
	if d == nil {
		return 0
	}
	return d.length
}

// ContextUUID is the exporter's UCP context id.
func (d *Descriptor) ContextUUID() uint64 {
	if d == nil {
		return 0
	}
	return d.contextUUID
}

// RegID is the registration id of the exporter's memory handle.
func (d *Descriptor) RegID() uint64 {
	if d == nil {
		return 0
	}
	return d.regID
}

// MDs are the descriptor's memory-domain entries, one per bit of MDMap in
// ascending order. The result is a copy, bytes included: changing it
// changes nothing in d.
func (d *Descriptor) MDs() []DescriptorMD {
	if d == nil || len(d.mds) == 0 {
		return nil
	}
	out := make([]DescriptorMD, len(d.mds))
	for i, md := range d.mds {
		out[i] = DescriptorMD{Mkey: bytes.Clone(md.Mkey), GlobalID: bytes.Clone(md.GlobalID)}
	}
	return out
}

// DescriptorMD is one memory domain's part of a descriptor, as
// Descriptor.MDs reports it.
type DescriptorMD struct {
	Mkey     []byte // UCT exported mkey (IB: lkey, vhca_id[, md uuid])
	GlobalID []byte // device id ("ib"/"gga" + system image GUID), trailing zeros stripped
}

func descError(format string, args ...any) error {
	return errs.New("ucp: parse exported descriptor", ucs.ErrInvalidParam, format, args...)
}

// ParseDescriptor checks b against the exported-memh wire format of UCX
// 1.15 and later (the same in every supported release; 6- and 14-byte IB
// mkeys alike, since the exporter may run another release) and decodes it. Every size field must
// fit, the per-MD sections must match the MD map, and the total must be
// len(b); anything else is an error wrapping ucs.ErrInvalidParam. The
// zero-length dummy is accepted only as exactly 3 zero bytes.
func ParseDescriptor(b []byte) (*Descriptor, error) {
	if len(b) == descDummySize && b[0] == 0 && b[1] == 0 && b[2] == 0 {
		return &Descriptor{dummy: true, raw: []byte{0, 0, 0}}, nil
	}
	if len(b) < descHeaderSize {
		return nil, descError("%d bytes is shorter than the %d-byte header", len(b), descHeaderSize)
	}
	if b[0] == 0 && b[1] == 0 && b[2] == 0 {
		return nil, descError("starts like the zero-length descriptor but is %d bytes, not 3", len(b))
	}
	if int(b[0])+1 != descHeaderSize {
		return nil, descError("header size %d, want %d (unknown format)", int(b[0])+1, descHeaderSize)
	}
	le := binary.LittleEndian
	d := &Descriptor{
		flags:       le.Uint16(b[1:]),
		mdMap:       le.Uint64(b[3:]),
		memType:     ucs.MemoryType(b[11]),
		address:     le.Uint64(b[12:]),
		length:      le.Uint64(b[20:]),
		contextUUID: le.Uint64(b[28:]),
		regID:       le.Uint64(b[36:]),
	}
	if d.flags != descFlagExport {
		return nil, descError("flags %#x, want %#x (exported)", d.flags, descFlagExport)
	}
	if d.mdMap == 0 {
		return nil, descError("empty memory-domain map")
	}
	if !d.memType.KnownByLoaded() {
		return nil, descError("unknown memory type %d", d.memType)
	}
	if d.length == 0 {
		return nil, descError("zero length (a zero-length mapping exports the 3-byte descriptor)")
	}
	if d.address+d.length < d.address {
		return nil, descError("address %#x + length %d wraps around", d.address, d.length)
	}
	p := b[descHeaderSize:]
	for range bits.OnesCount64(d.mdMap) {
		md, rest, err := parseDescriptorMD(p)
		if err != nil {
			return nil, descError("memory domain %d: %v", len(d.mds), err)
		}
		d.mds = append(d.mds, md)
		p = rest
	}
	if len(p) != 0 {
		return nil, descError("%d bytes past the last memory domain", len(p))
	}
	d.raw = bytes.Clone(b)
	return d, nil
}

// parseDescriptorMD decodes one entry: size (u8 size-1, or 0 then u16
// size-3), S, S mkey bytes, G, G global-id bytes; the fields must fill the
// entry exactly.
func parseDescriptorMD(p []byte) (DescriptorMD, []byte, error) {
	if len(p) < 1 {
		return DescriptorMD{}, nil, fmt.Errorf("missing")
	}
	size, hdr := int(p[0])+1, 1
	if p[0] == 0 {
		if len(p) < 3 {
			return DescriptorMD{}, nil, fmt.Errorf("truncated size")
		}
		size, hdr = int(binary.LittleEndian.Uint16(p[1:]))+3, 3
	}
	if size > len(p) {
		return DescriptorMD{}, nil, fmt.Errorf("size %d exceeds the %d bytes left", size, len(p))
	}
	e := p[hdr:size]
	if len(e) < 1 {
		return DescriptorMD{}, nil, fmt.Errorf("no mkey size")
	}
	s := int(e[0])
	if !validMkeySizes[s] {
		return DescriptorMD{}, nil, fmt.Errorf("mkey size %d is not one a UCX 1.16+ importer reads (6 or 14)", s)
	}
	if 1+s+1 > len(e) {
		return DescriptorMD{}, nil, fmt.Errorf("mkey of %d bytes overruns the entry", s)
	}
	g := int(e[1+s])
	if g == 0 || g > maxGlobalIDSize {
		return DescriptorMD{}, nil, fmt.Errorf("global id size %d out of range 1..%d", g, maxGlobalIDSize)
	}
	if 1+s+1+g != len(e) {
		return DescriptorMD{}, nil, fmt.Errorf("fields take %d bytes, entry has %d", 1+s+1+g, len(e))
	}
	gid := e[2+s:]
	if gid[len(gid)-1] == 0 {
		return DescriptorMD{}, nil, fmt.Errorf("global id has trailing zero bytes (packers strip them)")
	}
	return DescriptorMD{Mkey: bytes.Clone(e[1 : 1+s]), GlobalID: bytes.Clone(gid)}, p[size:], nil
}

// localMDs caches this machine's memory domains for import checks.
var localMDs = sync.OnceValues(uct.Probe)

// canExportHere reports whether a memory domain on this machine can
// export memory keys (false when they cannot be probed).
func canExportHere() bool {
	reports, err := localMDs()
	if err != nil {
		return false
	}
	for _, r := range reports {
		if r.HaveExportedMkey() == nil {
			return true
		}
	}
	return false
}

// noExporterHere is true when the probe succeeded and found no memory
// domain on this machine that can export keys: UCX then refuses to export
// every mapping, a context's memory domains being a subset of the probe's.
var noExporterHere = sync.OnceValue(func() bool {
	reports, err := localMDs()
	if err != nil {
		return false
	}
	for _, r := range reports {
		if r.HaveExportedMkey() == nil {
			return false
		}
	}
	return true
})

// checkImportable refuses a descriptor UCX would abort on or cannot use:
// every global id must match a local memory domain, and every local memory
// domain it matches must be able to export (UCX asserts that, in every build).
func (c *Context) checkImportable(d *Descriptor) error {
	const op = "ucp: import exported descriptor"
	if d.dummy {
		return nil
	}
	reports, err := localMDs()
	if err != nil {
		return err
	}
	matched := 0
	for _, md := range d.mds {
		for _, r := range reports {
			if r.Attr == nil || !bytes.Equal(r.Attr.GlobalID, md.GlobalID) {
				continue
			}
			if err := r.HaveExportedMkey(); err != nil {
				return &ucs.Error{Op: op, Err: ucs.ErrUnsupported, Wrapped: err,
					Reason: fmt.Sprintf("local memory domain %s/%s has the descriptor's global MD id but cannot export (UCX would abort the process)", r.Component, r.MD)}
			}
			matched++
		}
	}
	if matched == 0 {
		return errs.New(op, ucs.ErrUnreachable, "no matching MD: no local memory domain has any of the descriptor's %d global MD id(s)", len(d.mds))
	}
	return nil
}
