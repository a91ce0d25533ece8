//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package ucp

import (
	"encoding/binary"
	"os"
	"slices"
	"sync"
	"syscall"
	"unsafe"
)

// sysvSegmentExists reports whether System V segment id exists and this
// process may read its attributes (shmctl IPC_STAT: one system call, no
// mapping). UCX's sysv reader attaches any segment a peer names; this only
// keeps an attach that would fail (no such segment) from reaching UCX. A
// segment removed between this check and UCX's attach, or one readable but
// not writable here, can still fail there (the attach check that follows
// takes those).
func sysvSegmentExists(id uint32) bool {
	_, ok := sysvStat(id)
	return ok
}

// sysvStat is shmctl IPC_STAT of segment id: its ipc64_perm, whose
// uid, gid, cuid, cgid and mode are u32 at offsets 4 to 20 on every
// architecture of this file.
func sysvStat(id uint32) (perm [6]uint32, ok bool) {
	ds, ok := sysvStatRaw(id)
	if !ok {
		return perm, false
	}
	for i := range perm {
		perm[i] = binary.NativeEndian.Uint32(ds[4*i:])
	}
	return perm, true
}

// sysvSegmentSize is segment id's size (shm_segsz, after the 48-byte
// ipc64_perm on every architecture of this file); ok is false where
// IPC_STAT fails.
func sysvSegmentSize(id uint32) (size uint64, ok bool) {
	ds, ok := sysvStatRaw(id)
	if !ok {
		return 0, false
	}
	return binary.NativeEndian.Uint64(ds[48:]), true
}

func sysvStatRaw(id uint32) (ds [256]byte, ok bool) { // struct shmid64_ds is 112 bytes on amd64 and arm64
	const ipcStat = 2
	_, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcStat, uintptr(unsafe.Pointer(&ds)))
	return ds, errno == 0
}

// sysvReadWriteGranted reports whether the mode of segment id grants this
// process read and write, by the kernel's rule for shmat (ipcperms: the
// owner's bits for the owner or creator, else the group's for a member of
// the owner's or creator's group, else the others'). A process the mode
// refuses may still attach with CAP_IPC_OWNER: that is left to a real
// attach (sysvSegmentAttachable).
func sysvReadWriteGranted(id uint32) bool {
	perm, ok := sysvStat(id)
	if !ok {
		return false
	}
	uid, gid, cuid, cgid, mode := perm[1], perm[2], perm[3], perm[4], perm[5]
	euid := uint32(os.Geteuid())
	switch {
	case euid == uid || euid == cuid:
		mode >>= 6
	case inGroup(gid) || inGroup(cgid):
		mode >>= 3
	}
	return mode&6 == 6
}

// inGroup: gid is this process's effective group or a supplementary one
// (read once).
func inGroup(gid uint32) bool { return slices.Contains(processGroups(), gid) }

var processGroups = sync.OnceValue(func() []uint32 {
	gs := []uint32{uint32(os.Getegid())}
	more, _ := os.Getgroups()
	for _, g := range more {
		gs = append(gs, uint32(g))
	}
	return gs
})

// sysvSegmentAttachable attaches System V segment id read-write, as UCX's
// sysv reader does (shmat with no flags), and detaches it at once. The raw
// system calls bypass libc, where UCX's memory hooks would report the
// detach to its registration caches.
func sysvSegmentAttachable(id uint32) bool {
	addr, _, errno := syscall.Syscall(syscall.SYS_SHMAT, uintptr(int32(id)), 0, 0)
	if errno != 0 {
		return false
	}
	syscall.Syscall(syscall.SYS_SHMDT, addr, 0, 0)
	return true
}
