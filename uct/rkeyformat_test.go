package uct

import (
	"bytes"
	"encoding/binary"
	"github.com/ucxgo/ucx/internal/wire"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucs"
)

// The posix reader asserts on a zero length and reads a directory up to a
// NUL: such keys are refused before UCX; the real key of an allocation
// passes and unpacks.
func TestPosixRkeyChecked(t *testing.T) {
	md, err := OpenMD("posix")
	require.NoError(t, err)
	defer md.Close()
	mem, err := md.Alloc(4096, 0)
	require.NoError(t, err)
	defer mem.Close()
	real, err := mem.PackRemoteKey()
	require.NoError(t, err)
	require.NoError(t, checkRkey("op", "posix", real))
	rk, err := md.UnpackRemoteKey(real)
	require.NoError(t, err)
	require.NoError(t, rk.Close())

	zero := bytes.Clone(real)
	copy(zero[wire.PosixLengthOffset:], make([]byte, 8))
	_, err = md.UnpackRemoteKey(zero)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Contains(t, err.Error(), "zero segment length")

	le := binary.LittleEndian
	file := bytes.Clone(real)
	le.PutUint64(file, le.Uint64(file)&^(wire.PosixSegFlagProcfs|wire.PosixSegFlagShmOpen))
	_, err = md.UnpackRemoteKey(file)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Contains(t, err.Error(), "without a NUL-terminated directory")

	// A file-backed key carries its directory (POSIX_DIR other than /dev/shm).
	require.NoError(t, checkRkey("op", "posix", append(bytes.Clone(file), "/tmp\x00"...)))
	require.Error(t, checkRkey("op", "posix", append(bytes.Clone(file), "\x00"...)), "empty directory")
	require.Error(t, checkRkey("op", "posix", append(bytes.Clone(file), "/tmp"...)), "unterminated")
	require.Error(t, checkRkey("op", "posix", real[:23]), "short")
	for _, c := range []string{"sysv", "self", "tcp", "cma", "ib"} {
		require.NoError(t, checkRkey("op", c, make([]byte, 12)), c)
	}
}
