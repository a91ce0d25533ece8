package ucp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/ucxgo/ucx/internal/wire"
)

// The posix segment id's procfs form (mm_posix.c, UCX 1.16 to 1.23): the
// low 30 bits a pid, the next 30 a file descriptor of that process.
const (
	posixSegFlagHugeTLB = 1 << 61
	posixSegFlagPidNS   = 1 << 60
	posixSegFlagsMask   = wire.PosixSegFlagProcfs | wire.PosixSegFlagShmOpen | posixSegFlagHugeTLB | posixSegFlagPidNS
	posixProcfsBits     = 30
)

// posixSegmentFits reports whether the file a posix rkey names exists here
// and holds the length the key claims (one stat, no open). UCX's posix
// reader opens and maps whatever the key names; when the open fails, its
// cleanup of the half-unpacked key crashed (SIGSEGV at 0x8, UCX 1.18.1,
// one flipped bit of the segment id), and a length past the file made its
// memory hooks spin on the unmap. key is at least wire.PosixRkeyFixed
// bytes and passed wire.CheckPosixRkey's shape checks or is padded.
func posixSegmentFits(key []byte) bool {
	seg := binary.LittleEndian.Uint64(key)
	length := binary.LittleEndian.Uint64(key[wire.PosixLengthOffset:])
	mmid := seg &^ posixSegFlagsMask
	var path string
	switch {
	case seg&wire.PosixSegFlagProcfs != 0:
		const mask = 1<<posixProcfsBits - 1
		path = fmt.Sprintf("/proc/%d/fd/%d", mmid&mask, mmid>>posixProcfsBits&mask)
	case seg&wire.PosixSegFlagShmOpen != 0:
		path = fmt.Sprintf("/dev/shm/ucx_shm_posix_%x", mmid)
	default:
		dir := key[wire.PosixRkeyFixed:]
		end := bytes.IndexByte(dir, 0)
		if end < 1 {
			return false
		}
		path = fmt.Sprintf("%s/ucx_shm_posix_%x", dir[:end], mmid)
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && uint64(fi.Size()) >= length
}
