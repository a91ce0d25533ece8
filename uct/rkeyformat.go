package uct

import (
	"bytes"
	"encoding/binary"
	"github.com/ucxgo/ucx/internal/errs"

	"github.com/ucxgo/ucx/ucs"
)

// The posix MD's packed rkey (uct_posix_md_mkey_pack, src/uct/sm/mm/posix/
// mm_posix.c, the same in UCX 1.18 and 1.23): u64 segment id (flags in bits
// 60-63, the rest an id), u64 owner address, u64 length, then, for a
// file-backed segment (neither shm_open nor procfs flag), the directory as a
// NUL-terminated string. Its unpack opens and maps what the id names.
const (
	posixRkeyFixed      = 24
	posixLengthOffset   = 16
	posixSegFlagProcfs  = 1 << 63
	posixSegFlagShmOpen = 1 << 62
)

// checkRkey vets a packed rkey of component's format before uct_rkey_unpack
// reads it: UCX reads these bytes without a length and trusts them. Only
// the posix format has fields UCX asserts on (a zero length aborts the
// process) or reads to a terminator; the other formats of the supported
// releases are fixed-size records any value of which UCX handles (sysv: a
// shmid and an address; self, tcp, cma: nothing; ib: one u64).
func checkRkey(op, component string, b []byte) error {
	if component != "posix" {
		return nil
	}
	if len(b) < posixRkeyFixed {
		return errs.New(op, ucs.ErrInvalidParam, "posix rkey of %d bytes, shorter than its %d-byte header", len(b), posixRkeyFixed)
	}
	if binary.LittleEndian.Uint64(b[posixLengthOffset:]) == 0 {
		return errs.New(op, ucs.ErrInvalidParam, "posix rkey with a zero segment length (UCX asserts on it)")
	}
	seg := binary.LittleEndian.Uint64(b)
	if seg&(posixSegFlagProcfs|posixSegFlagShmOpen) == 0 && bytes.IndexByte(b[posixRkeyFixed:], 0) < 1 {
		return errs.New(op, ucs.ErrInvalidParam, "file-backed posix rkey without a NUL-terminated directory")
	}
	return nil
}
