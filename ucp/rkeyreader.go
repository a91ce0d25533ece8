package ucp

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sync"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucs"
)

// Which reader UCX gives each part of a packed key is the endpoint's:
// ucp_ep_rkey_unpack hands the part of remote memory domain m to the
// component of the local transport that reaches the peer's transport on m
// (the peer's worker address, seen in wire-up, never by the API). On UCX
// 1.16 to 1.18 a reader that fails is a crash (a posix segment that no longer attaches),
// and the readers that can fail on the machines this binding serves are
// the shared-memory ones, sysv and posix. So on those releases the
// endpoint asks UCX itself, once per memory-domain index: it unpacks a
// probe key whose one part every reader of allowedProbeReaders takes (a
// sysv reader attaches a segment of this process, a posix reader maps a
// file of it, the others decode bytes), and ucp_rkey_ptr on the result
// reaches the marker of the segment or the file the reader mapped, or
// nothing for a reader that maps nothing. checkRkey then tries each part
// on the reader it will meet.
type readerKind uint8

const (
	readerUnknown readerKind = iota // not asked yet
	readerOther                     // maps nothing; its unpack cannot fail (or the part is not unpacked)
	readerSysv
	readerPosix
)

// allowedProbeReaders: the components whose unpack of the probe part cannot
// fail, where they have a memory domain (read in UCX 1.16 to 1.18: ib, gga, knem, self and tcp decode or
// copy, cma and rdmacm have no reader, sysv and posix attach the probe's
// segment or file). A machine with another (xpmem, cuda_ipc, rocm_ipc)
// is not probed: a reader that fails on the probe part would crash it.
var allowedProbeReaders = map[string]bool{
	"self": true, "tcp": true, "sysv": true, "posix": true, "cma": true,
	"knem": true, "ib": true, "gga": true, "rdmacm": true,
}

// The markers in the probe's segment and file.
const (
	sysvProbeMarker  = 0x7679737347435855 // "UXCGsysv"
	posixProbeMarker = 0x7869736f70435855 // "UXCposix"
	probeMapLength   = 4096
)

// probeReaders reports whether keys unpacked here need their readers
// probed and can have them: UCX 1.16 to 1.18, a shared-memory reader here,
// and no reader outside allowedProbeReaders.
var probeReaders = sync.OnceValue(func() bool {
	if !rkeyFailureCrashes() {
		return false
	}
	local, err := rkeyLocalInfo()
	if err != nil || (local.sysvSize == 0 && local.posixSize == 0) {
		return false
	}
	reports, err := localMDs()
	if err != nil {
		return false
	}
	for _, r := range reports {
		// A component with no memory domain here reads no key part.
		if r.MD != "" && !allowedProbeReaders[r.Component] {
			return false
		}
	}
	return true
})

// endpointReaders is an endpoint's answer per remote memory-domain index.
// UCX keeps a reader once it gave one (ucp_wireup_get_dst_md_cmpts merges
// each new configuration with the last), and keys are unpacked only after
// wire-up (UnpackRemoteKey), so an answer stays true.
type endpointReaders struct {
	mu    sync.Mutex
	kinds [64]readerKind
}

// keyReaders is the reader of each memory-domain index of one key, where
// asked; otherwise checkRkey goes by each part's size.
type keyReaders struct {
	asked bool
	kinds [64]readerKind
}

// readersFor returns the readers of the memory-domain indices of the key
// b, asking UCX for those not known yet, where they need asking (UCX 1.16
// to 1.18 with a shared-memory reader here). Call with the endpoint
// entered.
func (ep *Endpoint) readersFor(b []byte) (keyReaders, error) {
	if len(b) < wire.RkeyHeaderSize || !probeReaders() {
		return keyReaders{}, nil
	}
	r := &ep.readers
	r.mu.Lock()
	defer r.mu.Unlock()
	var missing uint64
	for m := binary.LittleEndian.Uint64(b); m != 0; m &= m - 1 {
		if md := bits.TrailingZeros64(m); r.kinds[md] == readerUnknown {
			missing |= 1 << md
		}
	}
	if missing != 0 {
		if err := ep.probeReaders(missing, &r.kinds); err != nil {
			return keyReaders{}, err
		}
	}
	return keyReaders{asked: true, kinds: r.kinds}, nil
}

// probeReaders asks UCX for the reader of each index in mds: a System V
// segment and a file named for its id, each with a marker, live for the
// probes only (a crash meanwhile can leave the file behind).
func (ep *Endpoint) probeReaders(mds uint64, kinds *[64]readerKind) error {
	const op = "ucp: unpack rkey"
	seg, errno := cgo.NewMarkedSysvSegment(sysvProbeMarker)
	if errno != 0 {
		return errs.New(op, ucs.ErrNoResource, "making the System V segment that tells which reader UCX %s gives each part of a key: %v", ucs.LoadedVersion(), errno)
	}
	defer seg.Detach()
	dir, err := probeDir()
	if err != nil {
		return errs.New(op, ucs.ErrNoResource, "making the file that tells which reader UCX %s gives each part of a key: %v", ucs.LoadedVersion(), err)
	}
	defer os.RemoveAll(dir)
	file := make([]byte, probeMapLength)
	binary.LittleEndian.PutUint64(file, posixProbeMarker)
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ucx_shm_posix_%x", seg.ID)), file, 0o600); err != nil {
		return errs.New(op, ucs.ErrNoResource, "making the file that tells which reader UCX %s gives each part of a key: %v", ucs.LoadedVersion(), err)
	}

	// The part: a posix key of segment id seg.ID (no flags: the file in
	// dir), owner address 0 and the page's length; a sysv reader takes its
	// first 4 bytes as the segment id and the next 8 (zero) as the owner
	// address.
	part := make([]byte, wire.PosixRkeyFixed, wire.PosixRkeyFixed+len(dir)+1)
	binary.LittleEndian.PutUint64(part, uint64(seg.ID))
	binary.LittleEndian.PutUint64(part[wire.PosixLengthOffset:], probeMapLength)
	part = append(append(part, dir...), 0)
	key := make([]byte, 0, wire.RkeyHeaderSize+1+len(part)+2)
	for m := mds; m != 0; m &= m - 1 {
		md := bits.TrailingZeros64(m)
		key = binary.LittleEndian.AppendUint64(key[:0], 1<<md)
		key = append(key, byte(ucs.MemoryHost), byte(len(part)))
		key = append(append(key, part...), wire.RkeySysDevNone, 0)
		marker, mapped, st := ep.w.rkeyReader(ep.c, key)
		if err := errs.Status(ucs.Status(st), op); err != nil {
			return &ucs.Error{Op: op, Err: err, Reason: fmt.Sprintf("asking UCX %s which reader it gives memory domain %d", ucs.LoadedVersion(), md)}
		}
		switch {
		case !mapped:
			kinds[md] = readerOther
		case marker == sysvProbeMarker:
			kinds[md] = readerSysv
		case marker == posixProbeMarker:
			kinds[md] = readerPosix
		default:
			return errs.New(op, ucs.ErrUnsupported, "UCX %s gives memory domain %d a reader that maps neither the probe's segment nor its file", ucs.LoadedVersion(), md)
		}
	}
	return nil
}

// probeDir makes the probe file's directory, in /dev/shm where it can (no
// disk write), else in the temporary directory. Its path must fit a key
// part with the 24-byte posix header (255 bytes in all).
func probeDir() (string, error) {
	dir, err := os.MkdirTemp("/dev/shm", "ucxgo-probe-")
	if err != nil {
		dir, err = os.MkdirTemp("", "ucxgo-probe-")
	}
	if err == nil && len(dir) > 255-wire.PosixRkeyFixed-1 {
		os.RemoveAll(dir)
		return "", fmt.Errorf("directory path %q too long for a key", dir)
	}
	return dir, err
}
