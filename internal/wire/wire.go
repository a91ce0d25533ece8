// Package wire is ucx-go's one description of the packed-key formats UCX
// reads from other processes without a length: the UCP packed rkey
// (ucp_rkey_pack) and the UCT posix rkey inside it. Packages ucp and uct
// add the checks that need this machine's memory domains. (The exported
// descriptor's format has one reader, ucp.ParseDescriptor, and lives there.)
package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/ucxgo/ucx/ucs"
)

// The posix MD's packed rkey (uct_posix_md_mkey_pack, src/uct/sm/mm/posix/
// mm_posix.c, the same in UCX 1.16 to 1.23): u64 segment id (flags in bits
// 60-63, the rest an id), u64 owner address, u64 length, then, for a
// file-backed segment (neither shm_open nor procfs flag), the directory as
// a NUL-terminated string. Its unpack maps what the id names, for the
// length it claims, and asserts the length is not zero.
const (
	PosixRkeyFixed      = 24
	PosixLengthOffset   = 16
	PosixSegFlagProcfs  = 1 << 63
	PosixSegFlagShmOpen = 1 << 62
)

// CheckPosixRkey checks a posix UCT rkey before uct_rkey_unpack reads it.
func CheckPosixRkey(b []byte) error {
	if len(b) < PosixRkeyFixed {
		return fmt.Errorf("posix rkey of %d bytes, shorter than its %d-byte header", len(b), PosixRkeyFixed)
	}
	if binary.LittleEndian.Uint64(b[PosixLengthOffset:]) == 0 {
		return errors.New("posix rkey with a zero segment length (UCX asserts on it)")
	}
	seg := binary.LittleEndian.Uint64(b)
	if seg&(PosixSegFlagProcfs|PosixSegFlagShmOpen) == 0 && bytes.IndexByte(b[PosixRkeyFixed:], 0) < 1 {
		return errors.New("file-backed posix rkey without a NUL-terminated directory")
	}
	return nil
}

// The posix segment id: flags in bits 60-63, the rest an id, which in the
// procfs form is a pid (low 30 bits) and a file descriptor of that process
// (next 30 bits).
const (
	posixSegFlagHugeTLB = 1 << 61
	posixSegFlagPidNS   = 1 << 60
	posixSegFlagsMask   = PosixSegFlagProcfs | PosixSegFlagShmOpen | posixSegFlagHugeTLB | posixSegFlagPidNS
	posixProcfsBits     = 30
)

// PosixSegmentPath is the file a posix rkey (at least PosixRkeyFixed
// bytes) names, as UCX's posix reader opens it, and the length it claims:
// /proc/PID/fd/FD, /dev/shm/ucx_shm_posix_ID, or DIR/ucx_shm_posix_ID for
// the directory the key carries. ok is false for a file-backed key without
// a NUL-terminated directory.
func PosixSegmentPath(key []byte) (path string, length uint64, ok bool) {
	path, ok = posixPath(binary.LittleEndian.Uint64(key), key[PosixRkeyFixed:])
	return path, binary.LittleEndian.Uint64(key[PosixLengthOffset:]), ok
}

// PosixFIFOPath is the file a posix interface address (u64 segment id of
// the peer's receive FIFO, then, for a file-backed segment, the directory
// as a NUL-terminated string; uct_mm_iface_get_address) names, as UCX's
// posix transport opens it; ok is false where it names none.
func PosixFIFOPath(iface []byte) (path string, ok bool) {
	if len(iface) < 8 {
		return "", false
	}
	return posixPath(binary.LittleEndian.Uint64(iface), iface[8:])
}

// posixPath is the file UCX's posix MD opens for segment id seg: its
// /proc/PID/fd/FD, /dev/shm/ucx_shm_posix_ID or DIR/ucx_shm_posix_ID.
func posixPath(seg uint64, dir []byte) (string, bool) {
	id := seg &^ posixSegFlagsMask
	switch {
	case seg&PosixSegFlagProcfs != 0:
		const mask = 1<<posixProcfsBits - 1
		return fmt.Sprintf("/proc/%d/fd/%d", id&mask, id>>posixProcfsBits&mask), true
	case seg&PosixSegFlagShmOpen != 0:
		return fmt.Sprintf("/dev/shm/ucx_shm_posix_%x", id), true
	}
	end := bytes.IndexByte(dir, 0)
	if end < 1 {
		return "", false
	}
	return fmt.Sprintf("%s/ucx_shm_posix_%x", string(dir[:end]), id), true // string: a copy, so the bytes stay where they are
}

// The packed rkey of ucp_rkey_pack (ucp_rkey_pack_memh, src/ucp/core/
// ucp_rkey.c), host byte order, with no length, version or checksum:
//
//	u64 md_map       the packer's memory-domain indices
//	u8  memory type
//	per md_map bit, ascending: u8 size, then size bytes of that MD's UCT rkey
//	UCX 1.20+, md_map != 0: u8 sys_dev (0xff: unknown; bit 7: flush), and
//	  when it is not 0xff, 3-byte distances {sys_dev, fp8 latency,
//	  fp8 bandwidth} ending with a 0xff byte
const (
	RkeyHeaderSize   = 9 // md_map + memory type; also the whole zero-length key
	RkeySysDevNone   = 0xff
	rkeyDistanceSize = 3
	// RkeyTailMax bounds the 1.20+ tail: the device byte, a distance to
	// every device below rkeyMaxDistanceDev, the terminator.
	RkeyTailMax = 1 + rkeyMaxDistanceDev*rkeyDistanceSize + 1
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
)

// RkeyPartSizePacked reports whether some UCT component of UCX 1.16 to
// 1.23 packs an rkey of n bytes (rkey_packed_size in their sources): 0
// (tcp, cma, self up to 1.18), 8 (verbs), 12 (sysv), 14 (gga), 16 (knem,
// rocm copy), 24 and more (posix with its directory, xpmem, cuda, ugni).
// The size bytes are the only framing of a packed rkey: a damaged one
// moves the parts after it onto other readers, and such a walk shows a
// size no component packs unless the damage cancels out.
func RkeyPartSizePacked(n int) bool {
	switch n {
	case 0, 8, 12, 14, 16:
		return true
	}
	return n >= 24
}

// FormatError is a packed key that does not follow the format.
type FormatError struct{ Reason string }

func (e *FormatError) Error() string { return e.Reason }

func formatError(format string, args ...any) error {
	return &FormatError{fmt.Sprintf(format, args...)}
}

// WalkRkey checks b against the packed rkey format of UCX 1.16 to 1.23
// (either tail form, since the peer may run another release): it calls key
// for each UCT rkey in order, with the packer's MD index, and returns the
// 1.20+ sys_dev part (nil from a 1.16 to 1.19 packer). The buffer must end
// exactly where the format does. Format errors are *FormatError; key's
// errors are returned as they are.
func WalkRkey(b []byte, key func(i, md int, k []byte) error) (tail []byte, err error) {
	if len(b) < RkeyHeaderSize {
		return nil, formatError("%d bytes is shorter than the %d-byte header", len(b), RkeyHeaderSize)
	}
	mdMap := binary.LittleEndian.Uint64(b)
	if !ucs.MemoryType(b[8]).KnownByLoaded() {
		return nil, formatError("unknown memory type %d", b[8])
	}
	p := b[RkeyHeaderSize:]
	if mdMap == 0 {
		if len(p) != 0 {
			return nil, formatError("a key without memory domains is %d bytes, not %d", len(b), RkeyHeaderSize)
		}
		return nil, nil
	}
	i := 0
	for m := mdMap; m != 0; m &= m - 1 {
		md := bits.TrailingZeros64(m)
		if len(p) < 1 {
			return nil, formatError("memory domain %d: size missing", md)
		}
		n := int(p[0])
		if 1+n > len(p) {
			return nil, formatError("memory domain %d: %d-byte key overruns the %d bytes left", md, n, len(p)-1)
		}
		if key != nil {
			if err := key(i, md, p[1:1+n]); err != nil {
				return nil, err
			}
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
	if p[0] == RkeySysDevNone {
		if len(p) != 1 {
			return formatError("%d bytes after the unknown system device", len(p)-1)
		}
		return nil
	}
	last := -1
	for q := p[1:]; ; q = q[rkeyDistanceSize:] {
		if len(q) == 0 {
			return formatError("distances have no terminator")
		}
		if q[0] == RkeySysDevNone {
			if len(q) != 1 {
				return formatError("%d bytes after the distances", len(q)-1)
			}
			return nil
		}
		if len(q) < rkeyDistanceSize {
			return formatError("truncated distance")
		}
		dev, lat, bw := int(q[0]), q[1]&fp8ExponentMask, q[2]&fp8ExponentMask
		switch {
		case dev >= rkeyMaxDistanceDev:
			return formatError("distance to device %d (at most %d)", dev, rkeyMaxDistanceDev-1)
		case dev <= last:
			return formatError("distance to device %d after device %d (packers write them in ascending order)", dev, last)
		case lat > fp8MaxExponent:
			return formatError("device %d: latency exponent %d out of range", dev, lat)
		case bw == 0 || bw > fp8MaxExponent:
			return formatError("device %d: bandwidth exponent %d out of range 1..%d", dev, bw, fp8MaxExponent)
		}
		last = dev
	}
}
