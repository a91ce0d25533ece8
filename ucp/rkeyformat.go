package ucp

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"slices"
	"sync"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucs"
)

// The packed rkey's format is package wire's. ucp_ep_rkey_unpack has no
// length parameter: it walks the sizes, hands each reachable MD's bytes to
// a UCT component that reads as many as its own format says, and a 1.20+
// library reads the sys_dev part when the peer is 1.20+. Which component
// reads which entry is decided by the endpoint's wire-up, which the API
// does not expose, so checkRkey makes the bytes safe for whichever local
// component reads an entry.
const rkeyPadByte = 0xff

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
	maxRkey   int           // largest rkey_packed_size: no local reader takes more (posix: plus a string)
	posix     bool          // a posix MD exists, whose reader asserts on a zero length
	sysvSize  int           // the sysv MD's rkey_packed_size (u32 segment id, u64 owner address), 0 if none
	posixSize int           // the posix MD's rkey_packed_size, 0 if none
	posixCmpt cgo.Component // the posix component, when posixSize > 0
	packs     [256]bool     // the rkey_packed_size of each local MD
	packedMax int           // the largest key ucp_rkey_pack makes here: every MD's part, the longest 1.20+ tail
}

var rkeyLocalInfo = sync.OnceValues(func() (rkeyLocal, error) {
	reports, err := localMDs()
	if err != nil {
		return rkeyLocal{}, err
	}
	l := rkeyLocal{maxRkey: wire.PosixRkeyFixed, packedMax: wire.RkeyHeaderSize + wire.RkeyTailMax}
	for _, r := range reports {
		if r.Attr == nil {
			continue
		}
		l.packedMax += 1 + r.Attr.RkeyPackedSize
		l.maxRkey = max(l.maxRkey, r.Attr.RkeyPackedSize)
		if n := r.Attr.RkeyPackedSize; n < len(l.packs) {
			l.packs[n] = true
		}
		l.posix = l.posix || r.Component == "posix"
		if r.Component == "sysv" {
			l.sysvSize = r.Attr.RkeyPackedSize
		}
		if r.Component == "posix" {
			l.posixSize = r.Attr.RkeyPackedSize
		}
	}
	if l.posixSize > 0 {
		if l.posixCmpt, err = findComponent("posix"); err != nil {
			return rkeyLocal{}, err
		}
	}
	return l, nil
})

// readerBySize is the reader a part of n bytes meets where the endpoint's
// readers are not asked (UCX 1.19 and later return a reader's failure as
// an error): the sysv or posix one for their sizes, which a part of another
// MD can share (xpmem's 24 bytes are posix's where its directory is
// /dev/shm; such a part is dropped when it names no posix segment here).
func (l *rkeyLocal) readerBySize(n int) readerKind {
	switch {
	case l.sysvSize > 0 && n == l.sysvSize:
		return readerSysv
	case l.posixSize >= wire.PosixRkeyFixed && n == l.posixSize:
		return readerPosix
	}
	return readerOther
}

func rkeyError(format string, args ...any) error {
	return errs.New("ucp: unpack rkey", ucs.ErrInvalidParam, format, args...)
}

// walkRkey is wire.WalkRkey with its format errors as ucs.ErrInvalidParam.
func walkRkey(b []byte, key func(i, md int, k []byte) error) ([]byte, error) {
	tail, err := wire.WalkRkey(b, key)
	if err == nil {
		return tail, nil
	}
	if fe, ok := err.(*wire.FormatError); ok { // wire's own errors are never wrapped
		return nil, rkeyError("%s", fe.Reason)
	}
	return nil, err
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
func checkRkey(dst, b []byte, readers *keyReaders) ([]byte, error) {
	if len(b) < wire.RkeyHeaderSize {
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
	out = append(out, b[:wire.RkeyHeaderSize]...)
	mdMap := binary.LittleEndian.Uint64(b)
	tail, err := walkRkey(b, func(i, md int, key []byte) error {
		if !wire.RkeyPartSizePacked(len(key)) && !local.packs[len(key)] {
			return rkeyError("key %d (memory domain %d) is %d bytes, a size no UCX transport packs: a damaged size byte, which would move the parts after it onto other readers", i, md, len(key))
		}
		if local.posix && len(key) >= wire.PosixRkeyFixed && allZero(key[wire.PosixLengthOffset:wire.PosixRkeyFixed]) {
			return rkeyError("key %d: zero where a posix reader takes its segment length (UCX asserts on it)", i)
		}
		// Pad to the largest local read with 0xff (so that a posix reader
		// sees a non-zero length in any padding), then one NUL (so that its
		// directory string ends), within the u8 size.
		start := len(out)
		n := min(max(len(key), local.maxRkey)+1, 255)
		out = append(out, byte(n))
		out = append(out, key...)
		out = append(out, rkeyPadding[:max(n-len(key)-1, 0)]...)
		if n > len(key) {
			out = append(out, 0)
		}
		// A part its reader would fail to attach is dropped: UCX 1.16 to
		// 1.18 crash cleaning up the half-unpacked key (see
		// posixSegmentAttaches), and a peer on another host loses nothing
		// by it, since this host's shared memory never reads its parts.
		part := out[start+1:]
		kind := local.readerBySize(len(key))
		if readers != nil && readers.asked {
			kind = readers.kinds[md]
		}
		if (kind == readerSysv && !sysvSegmentAttaches(part)) ||
			(kind == readerPosix && !posixSegmentAttaches(local.posixCmpt, part)) {
			out = out[:start]
			mdMap &^= 1 << md
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
		return append(out[:wire.RkeyHeaderSize], 0), nil
	}
	out = append(out, tail...)
	if tail == nil && len(out) > wire.RkeyHeaderSize {
		out = append(out, wire.RkeySysDevNone)
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
			"between such releases use active messages, or keep tcp and cma out of this side's UCX_TLS where another transport reaches the peer (docs/behaviour.md, section Across releases on the wire)", loaded)
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
