//go:build amd64 || arm64 || riscv64 || ppc64le || loong64 || s390x

package ucp

import (
	"syscall"
	"unsafe"
)

// sysvSegmentExists reports whether System V segment id exists and this
// process may read its attributes (shmctl IPC_STAT: one system call, no
// mapping). UCX's sysv reader attaches any segment a peer names; this only
// keeps an attach that would fail (no such segment) from reaching UCX. A
// segment removed between this check and UCX's attach, or one readable but
// not writable here, can still fail there.
func sysvSegmentExists(id uint32) bool {
	const ipcStat = 2
	var ds [256]byte // struct shmid64_ds is 112 bytes on amd64 and arm64
	_, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcStat, uintptr(unsafe.Pointer(&ds)))
	return errno == 0
}
