package uct

import (
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/wire"

	"github.com/ucxgo/ucx/ucs"
)

// checkRkey vets a packed rkey of component's format before uct_rkey_unpack
// reads it: UCX reads these bytes without a length and trusts them. Only
// the posix format (package wire) has fields UCX asserts on (a zero length
// aborts the process) or reads to a terminator; the other formats of the
// supported releases are fixed-size records any value of which UCX handles
// (sysv: a shmid and an address; self, tcp, cma: nothing; ib: one u64).
func checkRkey(op, component string, b []byte) error {
	if component != "posix" {
		return nil
	}
	if err := wire.CheckPosixRkey(b); err != nil {
		return errs.New(op, ucs.ErrInvalidParam, "%v", err)
	}
	return nil
}
