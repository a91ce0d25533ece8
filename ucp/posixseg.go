package ucp

import (
	"os"

	"github.com/ucxgo/ucx/internal/wire"
)

// posixSegmentFits reports whether the file a posix rkey names exists here
// and holds the length the key claims (one stat, no open). UCX's posix
// reader opens and maps whatever the key names; when the open fails, its
// cleanup of the half-unpacked key crashed (SIGSEGV at 0x8, UCX 1.18.1,
// one flipped bit of the segment id), and a length past the file made its
// memory hooks spin on the unmap. key is at least wire.PosixRkeyFixed
// bytes.
func posixSegmentFits(key []byte) bool {
	path, length, ok := wire.PosixSegmentPath(key)
	if !ok {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && uint64(fi.Size()) >= length
}
