//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package ucp_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucs"
)

// A crafted address whose posix or System V interface names a receive
// FIFO smaller than this worker's: UCX maps it at the local FIFO's size and
// writes there (an empty posix file raised SIGBUS in ucp_ep_create on
// 1.16.0, 1.18.1 and 1.22.0). ConnectWorker refuses it; the test's own
// small file and segment stand in for a hostile peer's.
func TestCraftedWorkerAddressSmallFIFO(t *testing.T) {
	const procfs, pidBits = 1 << 63, 30
	small, err := os.Create(filepath.Join(t.TempDir(), "fifo"))
	require.NoError(t, err)
	defer small.Close()
	id, _, errno := syscall.Syscall(syscall.SYS_SHMGET, 0 /* IPC_PRIVATE */, 4096, 0o600|0o1000 /* IPC_CREAT */)
	require.Zero(t, errno)
	defer syscall.Syscall(syscall.SYS_SHMCTL, id, 0 /* IPC_RMID */, 0)

	for _, version := range []string{"v1", "v2"} {
		s := newAddressSetup(t, "posix,sysv,self,cma", version)
		info, err := wire.WalkWorkerAddress(s.raw)
		require.NoError(t, err)
		tried := 0
		for _, i := range info.Interfaces {
			at := offsetIn(s.raw, i.IfaceAddr)
			switch i.TransportCsum {
			case wire.TransportCsum("posix"):
				for _, size := range []int64{0, 4096} {
					require.NoError(t, small.Truncate(size))
					crafted := bytes.Clone(s.raw)
					flags := binary.LittleEndian.Uint64(i.IfaceAddr) >> 60 << 60
					binary.LittleEndian.PutUint64(crafted[at:], flags|procfs|uint64(os.Getpid())|uint64(small.Fd())<<pidBits)
					_, err := s.try(t, crafted)
					require.ErrorIs(t, err, ucs.ErrInvalidParam, "%s: posix FIFO of %d bytes", version, size)
					assert.Contains(t, err.Error(), "posix FIFO")
					tried++
				}
			case wire.TransportCsum("sysv"):
				crafted := bytes.Clone(s.raw)
				binary.LittleEndian.PutUint32(crafted[at:], uint32(id))
				_, err := s.try(t, crafted)
				require.ErrorIs(t, err, ucs.ErrInvalidParam, "%s: System V FIFO of 4096 bytes", version)
				assert.Contains(t, err.Error(), "System V FIFO")
				tried++
			}
		}
		require.Equal(t, 3, tried, "%s: the posix and sysv interfaces", version)
		taken, _ := s.try(t, s.raw)
		require.True(t, taken, "%s: the undamaged address", version)
	}
}
