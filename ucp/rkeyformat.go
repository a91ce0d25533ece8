package ucp

import (
	"encoding/binary"
	"errors"
	"github.com/ucxgo/ucx/internal/errs"
	"math/bits"
	"slices"
	"sync"

	"github.com/ucxgo/ucx/ucs"
)

// The packed rkey of ucp_rkey_pack (ucp_rkey_pack_memh, src/ucp/core/
// ucp_rkey.c), host byte order, with no length, version or checksum:
//
//	u64 md_map       the packer's memory-domain indices
//	u8  memory type
//	per md_map bit, ascending: u8 size, then size bytes of that MD's UCT rkey
//	UCX 1.20+, md_map != 0: u8 sys_dev (0xff: unknown; bit 7: flush), and
//	  when it is not 0xff, 3-byte distances {sys_dev, fp8 latency,
//	  fp8 bandwidth} ending with a 0xff byte
//
// ucp_ep_rkey_unpack has no length parameter: it walks the sizes, hands each
// reachable MD's bytes to a UCT component that reads as many as its own
// format says, and a 1.20+ library reads the sys_dev part when the peer is
// 1.20+. Which component reads which entry is decided by the endpoint's
// wire-up, which the API does not expose, so checkRkey makes the bytes safe
// for whichever local component reads an entry.
const (
	rkeyHeaderSize   = 9 // md_map + memory type; also the whole zero-length key
	rkeySysDevNone   = 0xff
	rkeyDistanceSize = 3
	// UCX marks distances in a u64 map by UCS_BIT(device): devices from 64
	// alias lower ones (their distance is then read uninitialized), and a
	// lane whose device is unknown (255) tests bit 255&63 = 63 and reads
	// past the 255-entry table. Packers number devices from 0.
	rkeyMaxDistanceDev = 63
	// fp8 (ucs/type/float8.h): the low 4 bits are the exponent, 15 is NaN;
	// packers write at most 13 (the cap of both the latency and bandwidth
	// ranges). A NaN latency or a zero or NaN bandwidth makes UCX's protocol
	// selection fail an assertion.
	fp8ExponentMask = 0x0f
	fp8MaxExponent  = 13
	// The posix reader (uct_posix_rkey_unpack) takes a length at bytes
	// 16..24 and asserts it is not zero.
	posixRkeyFixed    = 24
	posixLengthOffset = 16
	rkeyPadByte       = 0xff
)

// rkeyHostOnly: the loaded release hangs inside ucp_get_nbx on a key of
// another memory type (measured: 1.18.1, 1.19.1 and 1.20.1 hang; 1.21.0,
// 1.22.0 and 1.23.0 answer), asked once (a cgo call).
var rkeyHostOnly = sync.OnceValue(func() bool { return ucs.LoadedVersion().Minor < 21 })

var rkeyPadding = func() (p [255]byte) {
	for i := range p {
		p[i] = rkeyPadByte
	}
	return p
}()

// rkeyLocal is what checkRkey needs from this machine's memory domains.
type rkeyLocal struct {
	maxRkey  int  // largest rkey_packed_size: no local reader takes more (posix: plus a string)
	posix    bool // a posix MD exists, whose reader asserts on a zero length
	sysvSize int  // the sysv MD's rkey_packed_size (u32 segment id, u64 owner address), 0 if none
}

var rkeyLocalInfo = sync.OnceValues(func() (rkeyLocal, error) {
	reports, err := localMDs()
	if err != nil {
		return rkeyLocal{}, err
	}
	l := rkeyLocal{maxRkey: posixRkeyFixed}
	for _, r := range reports {
		if r.Attr == nil {
			continue
		}
		l.maxRkey = max(l.maxRkey, r.Attr.RkeyPackedSize)
		l.posix = l.posix || r.Component == "posix"
		if r.Component == "sysv" {
			l.sysvSize = r.Attr.RkeyPackedSize
		}
	}
	return l, nil
})

func rkeyError(format string, args ...any) error {
	return errs.New("ucp: unpack rkey", ucs.ErrInvalidParam, format, args...)
}

// walkRkey checks b against the packed rkey format of UCX 1.16 to 1.23
// (either tail form, since the peer may run another release): it calls key
// for each UCT rkey in order, with the packer's MD index, and returns the
// 1.20+ sys_dev part (nil from a 1.16 to 1.19 packer). The buffer must end
// exactly where the format does.
func walkRkey(b []byte, key func(i, md int, k []byte) error) (tail []byte, err error) {
	if len(b) < rkeyHeaderSize {
		return nil, rkeyError("%d bytes is shorter than the %d-byte header", len(b), rkeyHeaderSize)
	}
	mdMap := binary.LittleEndian.Uint64(b)
	if !ucs.MemoryType(b[8]).KnownByLoaded() {
		return nil, rkeyError("unknown memory type %d", b[8])
	}
	p := b[rkeyHeaderSize:]
	if mdMap == 0 {
		if len(p) != 0 {
			return nil, rkeyError("a key without memory domains is %d bytes, not %d", len(b), rkeyHeaderSize)
		}
		return nil, nil
	}
	i := 0
	for m := mdMap; m != 0; m &= m - 1 {
		md := bits.TrailingZeros64(m)
		if len(p) < 1 {
			return nil, rkeyError("memory domain %d: size missing", md)
		}
		n := int(p[0])
		if 1+n > len(p) {
			return nil, rkeyError("memory domain %d: %d-byte key overruns the %d bytes left", md, n, len(p)-1)
		}
		if err := key(i, md, p[1:1+n]); err != nil {
			return nil, err
		}
		i++
		p = p[1+n:]
	}
	if len(p) == 0 {
		return nil, nil
	}
	if err := checkRkeyTail(p); err != nil {
		return nil, err
	}
	return p, nil
}

// checkRkeyTail checks the 1.20+ sys_dev part: 0xff alone, or a device
// byte, distances to devices in ascending order, and the 0xff terminator.
func checkRkeyTail(p []byte) error {
	if p[0] == rkeySysDevNone {
		if len(p) != 1 {
			return rkeyError("%d bytes after the unknown system device", len(p)-1)
		}
		return nil
	}
	last := -1
	for q := p[1:]; ; q = q[rkeyDistanceSize:] {
		if len(q) == 0 {
			return rkeyError("distances have no terminator")
		}
		if q[0] == rkeySysDevNone {
			if len(q) != 1 {
				return rkeyError("%d bytes after the distances", len(q)-1)
			}
			return nil
		}
		if len(q) < rkeyDistanceSize {
			return rkeyError("truncated distance")
		}
		dev, lat, bw := int(q[0]), q[1]&fp8ExponentMask, q[2]&fp8ExponentMask
		switch {
		case dev >= rkeyMaxDistanceDev:
			return rkeyError("distance to device %d (at most %d)", dev, rkeyMaxDistanceDev-1)
		case dev <= last:
			return rkeyError("distance to device %d after device %d (packers write them in ascending order)", dev, last)
		case lat > fp8MaxExponent:
			return rkeyError("device %d: latency exponent %d out of range", dev, lat)
		case bw == 0 || bw > fp8MaxExponent:
			return rkeyError("device %d: bandwidth exponent %d out of range 1..%d", dev, bw, fp8MaxExponent)
		}
		last = dev
	}
}

// checkRkey validates b and appends to dst the copy UCX is to read: every
// UCT rkey padded (its size byte raised) so that whichever local component
// reads it, a fixed-size read stays inside the buffer, a posix reader finds
// a non-zero length and a NUL-terminated directory, and a 1.20+ library
// finds the unknown-device byte where a 1.18 or 1.19 packer wrote none.
// Honest readers never look at the padding. Malformed keys are
// ucs.ErrInvalidParam with the reason, and never reach UCX. Callers pass a
// stack array as dst (rkeyScratchSize fits the keys of this machine's
// transports), so that the copy costs no allocation.
func checkRkey(dst, b []byte) ([]byte, error) {
	if len(b) < rkeyHeaderSize {
		_, err := walkRkey(b, nil)
		return nil, err
	}
	if mt := ucs.MemoryType(b[8]); mt != ucs.MemoryHost && mt.KnownByLoaded() && rkeyHostOnly() {
		return nil, rkeyError("remote memory type %s: UCX %s has no protocol for it here and hangs in ucp_get_nbx or aborts the worker (measured on 1.18.1 to 1.20.1), so only host memory keys are taken", mt, ucs.LoadedVersion())
	}
	local, err := rkeyLocalInfo()
	if err != nil {
		return nil, err
	}
	// Each key grows to at most max(its size, maxRkey)+1 bytes; the tail
	// by the unknown-device byte and a NUL.
	out := slices.Grow(dst[:0], len(b)+bits.OnesCount64(binary.LittleEndian.Uint64(b))*(local.maxRkey+2)+2)
	out = append(out, b[:rkeyHeaderSize]...)
	mdMap := binary.LittleEndian.Uint64(b)
	tail, err := walkRkey(b, func(i, md int, key []byte) error {
		if local.posix && len(key) >= posixRkeyFixed && allZero(key[posixLengthOffset:posixRkeyFixed]) {
			return rkeyError("key %d: zero where a posix reader takes its segment length (UCX asserts on it)", i)
		}
		// A System V part naming no segment here (another host's segment,
		// or a damaged key) is dropped: when UCX's own attach fails, its
		// cleanup of the half-unpacked key crashes (SIGSEGV, UCX 1.18.1). A peer on another host loses nothing by it (this
		// host's shared memory never reads its parts). Posix parts are not
		// tried: UCX's posix reader maps the length the key claims, and a
		// damaged length made its memory hooks spin on the unmap.
		if local.sysvSize > 0 && len(key) == local.sysvSize && !sysvSegmentExists(binary.LittleEndian.Uint32(key)) {
			mdMap &^= 1 << md
			return nil
		}
		// Pad to the largest local read with 0xff (so that a posix reader
		// sees a non-zero length in any padding), then one NUL (so that its
		// directory string ends), within the u8 size.
		n := min(max(len(key), local.maxRkey)+1, 255)
		out = append(out, byte(n))
		out = append(out, key...)
		out = append(out, rkeyPadding[:max(n-len(key)-1, 0)]...)
		if n > len(key) {
			out = append(out, 0)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(out, mdMap)
	if mdMap == 0 {
		// Every part was dropped: the key of no memory domain, which UCX
		// reads as 9 bytes (its zero-length form).
		return append(out[:rkeyHeaderSize], 0), nil
	}
	out = append(out, tail...)
	if tail == nil && len(out) > rkeyHeaderSize {
		out = append(out, rkeySysDevNone)
	}
	// A last NUL bounds any string read that ran through a 255-byte key.
	return append(out, 0), nil
}

// rkeyScratchSize holds the padded copy of a key from the shared-memory,
// tcp and verbs transports without an allocation (larger keys allocate).
const rkeyScratchSize = 1024

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// explainRkeyRefusal adds the cross-release reason to UCX's refusal of a
// key that passed checkRkey. UCX 1.16 to 1.18 register memory on tcp and
// cma and pack an empty entry for each; from 1.19 on those transports have
// no registration, and ucp_ep_rkey_unpack answers UCS_ERR_UNSUPPORTED for
// such an entry wherever tcp or cma reaches the peer (measured: a 1.19.1
// to 1.23.0 importer and a 1.16.0 to 1.18.1 exporter over tcp). The packed
// key carries no release number, so the peer's side is named by range.
func explainRkeyRefusal(err error, packed []byte) error {
	loaded := ucs.LoadedVersion()
	if loaded.Minor < 19 || !errors.Is(err, ucs.ErrUnsupported) || !hasEmptyEntry(packed) {
		return err
	}
	return errs.New("ucp: unpack rkey", ucs.ErrUnsupported,
		"UCX %s here cannot unpack a key packed by UCX 1.16 to 1.18 whose tcp or cma entry reaches this endpoint (those transports lost memory registration in 1.19); "+
			"between such releases use active messages, or keep tcp and cma out of this side's UCX_TLS where another transport reaches the peer (see the README's UCX releases)", loaded)
}

// hasEmptyEntry reports whether a well-formed key has an entry of size 0.
func hasEmptyEntry(b []byte) bool {
	empty := false
	_, _ = walkRkey(b, func(_, _ int, k []byte) error {
		empty = empty || len(k) == 0
		return nil
	})
	return empty
}
