//go:build !(linux && (amd64 || arm64 || riscv64 || loong64))

package ucp

// sysvSegmentExists cannot ask the kernel here (Go's syscall package has
// no shmctl, shmat or shmdt number for this architecture): every System V part goes to UCX as is.
func sysvSegmentExists(uint32) bool { return true }

// sysvSegmentAttachable likewise.
func sysvSegmentAttachable(uint32) bool { return true }

// sysvReadWriteGranted likewise.
func sysvReadWriteGranted(uint32) bool { return true }

// sysvSegmentSize: no System V calls here, so no size is known.
func sysvSegmentSize(uint32) (uint64, bool) { return 0, false }
