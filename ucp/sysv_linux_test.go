//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package ucp

import (
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSysvSegment makes a one-page private segment with mode, removed when
// the test ends.
func newSysvSegment(t *testing.T, mode uintptr) uint32 {
	const ipcPrivate, ipcCreat, ipcRmid = 0, 0o1000, 0
	id, _, errno := syscall.Syscall(syscall.SYS_SHMGET, ipcPrivate, 4096, ipcCreat|mode)
	require.Zero(t, errno, "shmget")
	t.Cleanup(func() { syscall.Syscall(syscall.SYS_SHMCTL, id, ipcRmid, 0) })
	return uint32(id)
}

// The sysv checks against segments of known modes: what the mode grants,
// and what a real read-write attach (UCX's) finds, which for a mode that
// refuses the owner writing depends on CAP_IPC_OWNER (root has it).
func TestSysvSegmentChecks(t *testing.T) {
	rw := newSysvSegment(t, 0o600)
	ro := newSysvSegment(t, 0o400)
	assert.True(t, sysvSegmentExists(rw))
	assert.True(t, sysvReadWriteGranted(rw))
	assert.True(t, sysvSegmentAttachable(rw))
	assert.True(t, sysvSegmentExists(ro))
	assert.False(t, sysvReadWriteGranted(ro), "mode 0400 grants its owner no write")
	assert.Equal(t, os.Geteuid() == 0, sysvSegmentAttachable(ro), "a read-write attach of a 0400 segment succeeds for root only")
	key := binary.LittleEndian.AppendUint32(nil, ro)
	key = append(key, make([]byte, 8)...)
	if rkeyFailureCrashes() {
		assert.Equal(t, sysvSegmentAttachable(ro), sysvSegmentAttaches(key), "on this release the attach decides")
	}
	assert.False(t, sysvSegmentExists(0xffffffff))
	assert.False(t, sysvSegmentAttachable(0xffffffff))
}
