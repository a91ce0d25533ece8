package ucp

import (
	"encoding/binary"
	"os"
	"sync"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucs"
)

// posixSegmentAttaches reports whether UCX's posix reader maps the segment
// a posix rkey (at least wire.PosixRkeyFixed bytes) names. The file must
// exist here and hold the length the key claims (a stat first: UCX maps
// the length the key claims, and a length past the file made its memory
// hooks spin on the unmap); then the posix component's own unpack maps a
// copy and releases it at once, which catches what a stat cannot: a
// HUGETLB flag UCX refuses to map, a file this user may not open.
//
// Why a part must not fail inside ucp_ep_rkey_unpack: UCX 1.16 to 1.18,
// when one part's unpack fails, release every part of the half-built key,
// the failed and the unread ones included, with handles never set
// (SIGSEGV at 0x8 or 0x38, or a munmap of garbage and a corrupted cache
// that failed an assertion in ucp_cleanup, pgtable.c:529; measured on
// 1.18.1). 1.19 and later release only the parts unpacked
// (ucp_rkey.c, "Keep md_map consistent with tl_rkey") and return the
// error; a dropped part is the same answer on every release.
func posixSegmentAttaches(posix cgo.Component, key []byte) bool {
	path, length, ok := wire.PosixSegmentPath(key)
	if !ok || length == 0 { // UCX asserts the length is not zero
		return false
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || uint64(fi.Size()) < length {
		return false
	}
	return posix.TryRemoteKey(key) == 0
}

// sysvSegmentAttaches reports whether UCX's sysv reader attaches the
// segment a sysv rkey (its u32 id first) names: the segment exists and this
// process may read its attributes (shmctl IPC_STAT, no mapping). Where a
// failed attach crashes UCX (1.16 to 1.18, rkeyFailureCrashes), its mode
// must also grant this process read and write, as UCX attaches it, or a
// real attach, detached at once, must succeed (about 8 µs more per unpack
// when every key took it, 1.18.1; so only where the mode refuses).
func sysvSegmentAttaches(key []byte) bool {
	id := binary.LittleEndian.Uint32(key)
	if !rkeyFailureCrashes() {
		return sysvSegmentExists(id)
	}
	return sysvReadWriteGranted(id) || sysvSegmentAttachable(id)
}

// rkeyFailureCrashes: the loaded release turns a failed part of a key into
// a crash (UCX 1.18 and older), asked once.
var rkeyFailureCrashes = sync.OnceValue(func() bool { return ucs.LoadedVersion().Minor <= 18 })

// findComponent is libuct's component of that name.
func findComponent(name string) (cgo.Component, error) {
	list, st := cgo.Components()
	if err := errs.Status(ucs.Status(st), "ucp: query uct components"); err != nil {
		return cgo.Component{}, err
	}
	for _, c := range list {
		if info, st := c.Query(); st == 0 && info.Name == name {
			return c, nil
		}
	}
	return cgo.Component{}, errs.New("ucp: query uct components", ucs.ErrNoDevice, "no %q component, though a memory domain of it was probed", name)
}
