package wire

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/ucxgo/ucx/ucs"
)

// UCX's worker address (ucp_worker_get_address; packed by ucp_address_pack
// and read by ucp_address_unpack, src/ucp/wireup/address.c, the same on the
// wire in UCX 1.16 to 1.23) has no length and no checksum, and UCX follows
// its length bytes without a bound. In the default (non-unified) mode:
//
//	header   v1: u8 version | flags<<4, then the u64 worker uuid always
//	         v2: u8 version | release<<4, u8 flags, u64 uuid if flagged
//	         u64 client id if flagged; u8 length + name if DEBUG_INFO
//	0xff alone: no devices. Otherwise per device, until one marked LAST:
//	  u8 md index (0x80: no interfaces) [v2: 0x7f means the next byte]
//	  u8 device address length (0x80 LAST, 0x40 paths, 0x20 sys device;
//	     low 5 bits) [v2: 0x1f means the next byte], u8 paths and u8 sys
//	     device if flagged, the device address
//	  per interface unless the device has none, until one marked LAST:
//	    u16 transport name checksum, attributes (v1: 16 bytes, three
//	    floats and flags; v2: 8 bytes, three fp8 and flags), u8 interface
//	    address length (0x80 LAST, 0x40 endpoint addresses follow; low 6
//	    bits) [v2: 0x3f means the next byte], the interface address
//
// A worker address carries no endpoint addresses (UCX packs them only into
// its wire-up messages). In unified mode (UCX_UNIFIED_MODE=y) the
// interface entries have no lengths, and a walk of this format fails.
const (
	addrVersionMask     = 0x0f
	addrVersionV1       = 0
	addrVersionV2       = 1
	addrFlagDebugInfo   = 1 << 0
	addrFlagWorkerUUID  = 1 << 1
	addrFlagClientID    = 1 << 2
	addrNoDevices       = 0xff
	addrMDEmpty         = 0x80
	addrMDMask          = 0x7f
	addrDevLast         = 0x80
	addrDevPaths        = 0x40
	addrDevSysDevice    = 0x20
	addrDevLenMask      = 0x1f
	addrIfaceLast       = 0x80
	addrIfaceHasEPAddrs = 0x40
	addrIfaceLenMask    = 0x3f
	addrAttrsV1         = 16
	addrAttrsV2         = 8
	addrAttrsV2SegSize  = 4 // u16, in units of addrSegSizeUnit
	addrAttrsV2Flags    = 6 // u16
	addrSegSizeUnit     = 64
	addrIfaceFlagAMSync = 1 << 1
	// UCP_MAX_RESOURCES: UCX's unpack refuses more interfaces than this.
	addrMaxInterfaces = 128
	// UCP_MAX_MDS: a memory-domain index is a bit of a u64.
	addrMaxMDs = 64
	// Packers up to 1.18 set two MD flags (alloc, reg) in a v1 md index
	// byte, and readers up to 1.18 mask them off; 1.19+ packers do not set
	// them, and 1.19+ readers clear them only where the v1 address's
	// release (its minor mod 16 in an empty last device's md index; none
	// means old) is 1.18 or older.
	addrMDLegacyBits        = 0x60
	addrLastLegacyMDRelease = 18
	addrReleaseBits         = 4
)

// loadedMinor is the loaded release's minor, asked of the library once.
var loadedMinor = sync.OnceValue(func() int { return int(ucs.LoadedVersion().Minor) })

// releaseOfV1 is the minor release a v1 address's last md index tells, as
// UCX reads it: the release with those low bits nearest to the loaded one.
func releaseOfV1(md int) int {
	const span = 1 << addrReleaseBits
	packed := md & (span - 1)
	minor := loadedMinor()
	delta := minor%span - packed
	base := minor / span
	if delta >= span/2 {
		base++
	}
	if delta <= -span/2 {
		base--
	}
	return packed + max(0, base)*span
}

// AddressInterface is one transport interface a worker address offers.
type AddressInterface struct {
	// TransportCsum is UCX's checksum of the transport's name: a peer's
	// interface is used only by a local transport with the same one.
	TransportCsum uint16
	// MDIndex is the packer's memory-domain index of the device, which
	// tells the reader which part of the packer's remote keys the
	// transport reads.
	MDIndex int
	// AMSegment is the largest active message the interface takes (its
	// seg size) where a v2 address announces that it takes them (UCX's
	// AM_SYNC flag), -1 otherwise (v1 carries no seg size).
	AMSegment int
	// DeviceAddr and IfaceAddr are the addresses the transport reads.
	DeviceAddr, IfaceAddr []byte
}

// WorkerAddressInfo is what WalkWorkerAddress read.
type WorkerAddressInfo struct {
	Version    int // 0 (v1) or 1 (v2)
	Interfaces []AddressInterface
}

// WalkWorkerAddress checks b against the worker address format above and
// returns its interfaces; b must end exactly where the format does. The
// transport-level content of the addresses is not checked here (that
// needs this machine's transports). Errors are *FormatError.
func WalkWorkerAddress(b []byte) (WorkerAddressInfo, error) {
	var info WorkerAddressInfo
	r := addrReader{b: b}
	if len(b) == 0 {
		return info, formatError("empty address")
	}
	hdr := r.u8()
	info.Version = int(hdr & addrVersionMask)
	var flags byte
	switch info.Version {
	case addrVersionV1:
		flags = hdr >> 4
		r.skip(8) // the v1 reader always takes a uuid
	case addrVersionV2:
		flags = r.u8()
		if flags&addrFlagWorkerUUID != 0 {
			r.skip(8)
		}
	default:
		return info, formatError("address format version %d: UCX 1.16 to 1.23 pack 0 or 1, and abort on others", info.Version)
	}
	if flags&addrFlagClientID != 0 {
		r.skip(8)
	}
	if flags&addrFlagDebugInfo != 0 {
		r.skip(int(r.u8()))
	}
	if r.err != nil {
		return info, r.err
	}
	if r.peek() == addrNoDevices {
		r.u8()
		return info, r.end()
	}
	v2 := info.Version == addrVersionV2
	attrsLen := addrAttrsV1
	if v2 {
		attrsLen = addrAttrsV2
	}
	for dev := 0; ; dev++ {
		mdByte := r.u8()
		md := int(r.extended(mdByte&addrMDMask, addrMDMask, v2))
		lenByte := r.u8()
		devLen := r.extended(lenByte&addrDevLenMask, addrDevLenMask, v2)
		if lenByte&addrDevPaths != 0 && r.u8() == 0 && r.err == nil {
			// UCX divides by it: a score of NaN aborted its lane
			// selection (select.c:356, 1.18.1).
			return info, formatError("device %d: zero paths", dev)
		}
		if lenByte&addrDevSysDevice != 0 {
			r.u8()
		}
		devAddr := r.bytes(int(devLen))
		if r.err != nil {
			return info, r.err
		}
		for last := mdByte&addrMDEmpty != 0; !last; {
			if len(info.Interfaces) == addrMaxInterfaces {
				return info, formatError("more than %d interfaces", addrMaxInterfaces)
			}
			csum := r.u16()
			attrs := r.bytes(attrsLen)
			ifByte := r.u8()
			ifLen := r.extended(ifByte&addrIfaceLenMask, addrIfaceLenMask, v2)
			ifAddr := r.bytes(int(ifLen))
			if r.err != nil {
				return info, r.err
			}
			if ifByte&addrIfaceHasEPAddrs != 0 {
				return info, formatError("device %d: interface %d has endpoint addresses, which a worker address never carries", dev, len(info.Interfaces))
			}
			if err := checkAddressAttrs(attrs, v2); err != nil {
				return info, formatError("device %d: interface %d: %v", dev, len(info.Interfaces), err)
			}
			seg := -1
			if v2 && binary.LittleEndian.Uint16(attrs[addrAttrsV2Flags:])&addrIfaceFlagAMSync != 0 {
				seg = int(binary.LittleEndian.Uint16(attrs[addrAttrsV2SegSize:])) * addrSegSizeUnit
			}
			info.Interfaces = append(info.Interfaces, AddressInterface{TransportCsum: csum, MDIndex: md, AMSegment: seg, DeviceAddr: devAddr, IfaceAddr: ifAddr})
			last = ifByte&addrIfaceLast != 0
		}
		if lenByte&addrDevLast != 0 {
			strip := !v2 && (loadedMinor() <= addrLastLegacyMDRelease || mdByte&addrMDEmpty == 0 || releaseOfV1(md) <= addrLastLegacyMDRelease)
			for k := range info.Interfaces {
				i := &info.Interfaces[k]
				if strip {
					i.MDIndex &^= addrMDLegacyBits
				}
				if i.MDIndex >= addrMaxMDs {
					return info, formatError("interface %d: memory domain index %d: UCX has at most %d, and a larger one overflows its 64-bit domain maps", k, i.MDIndex, addrMaxMDs)
				}
			}
			return info, r.end()
		}
	}
}

// checkAddressAttrs refuses interface attributes that UCX's wire-up
// computes with unchecked: a bandwidth of zero, NaN or infinity (UCX checks
// only bandwidth <= 0 after unpacking, and NaN passes), and an overhead or
// latency that is negative, NaN or infinite.
func checkAddressAttrs(a []byte, v2 bool) error {
	if v2 {
		// fp8 overhead, bandwidth, latency, then prio, seg size, flags.
		ovh, bw, lat := a[0]&fp8ExponentMask, a[1]&fp8ExponentMask, a[2]&fp8ExponentMask
		switch {
		case ovh > fp8MaxExponent, lat > fp8MaxExponent:
			return formatError("overhead or latency exponent out of range")
		case bw == 0 || bw > fp8MaxExponent:
			return formatError("bandwidth exponent %d out of range 1..%d", bw, fp8MaxExponent)
		}
		return nil
	}
	// float overhead, bandwidth (negative from UCX up to 1.11), latency.
	// A negative overhead or latency gives a lane a negative score, which
	// UCX's lane selection asserts against (select.c:356, 1.18.1).
	for i, name := range []string{"overhead", "bandwidth", "latency"} {
		f := float64(math.Float32frombits(binary.LittleEndian.Uint32(a[4*i:])))
		if math.IsNaN(f) || math.IsInf(f, 0) || (name == "bandwidth" && f == 0) || (name != "bandwidth" && f < 0) {
			return formatError("%s %v", name, f)
		}
	}
	return nil
}

// addrReader reads b from the front; the first overrun sticks in err and
// later reads return zeros.
type addrReader struct {
	b   []byte
	p   int
	err error
}

func (r *addrReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b)-r.p {
		r.err = formatError("address ends at byte %d, %d bytes short of the field at %d", len(r.b), n-(len(r.b)-r.p), r.p)
		return nil
	}
	s := r.b[r.p : r.p+n : r.p+n]
	r.p += n
	return s
}

func (r *addrReader) skip(n int)         { r.take(n) }
func (r *addrReader) bytes(n int) []byte { return r.take(n) }

func (r *addrReader) u8() byte {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (r *addrReader) u16() uint16 {
	if s := r.take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}

func (r *addrReader) peek() byte {
	if r.err != nil || r.p >= len(r.b) {
		return 0
	}
	return r.b[r.p]
}

// extended is UCX's byte-extended value: in v2, a low part equal to its
// mask means the value is the next byte.
func (r *addrReader) extended(low, mask byte, v2 bool) byte {
	if v2 && low == mask {
		return r.u8()
	}
	return low
}

func (r *addrReader) end() error {
	if r.err == nil && r.p != len(r.b) {
		return formatError("%d bytes after the address's end at byte %d", len(r.b)-r.p, r.p)
	}
	return r.err
}

// TransportCsum is UCX's checksum of a transport name, as a worker address
// carries it (ucs_crc16_string: CRC-16, reflected polynomial 0x8408,
// initial value and final xor 0xffff).
func TransportCsum(name string) uint16 {
	crc := uint16(0xffff)
	for i := 0; i < len(name); i++ {
		crc ^= uint16(name[i])
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x8408
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}
