package ucp_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// The newcomer's region: connect through a listener, unpack the peer's
// packed region at once, and use the peer's memory as an io.ReaderAt /
// io.WriterAt with offsets, never addresses.
func TestRemoteRegionReadWriteAt(t *testing.T) {
	p := newPair(t, onTLS("tcp"), viaListener(), runClient())
	runWorker(t, p.server)
	target, err := p.ctx.Allocate(1 << 16)
	require.NoError(t, err)
	defer target.Close()
	packed, err := target.PackRegion()
	require.NoError(t, err)

	region, err := p.ep.UnpackRegion(waitCtx(t), packed)
	require.NoError(t, err)
	key := region.Key()
	defer key.Close()
	assert.Equal(t, target.Len(), region.Len())
	assert.Equal(t, target.Address(), region.Address())

	// The key knows the peer's mapping: a region past it is refused (a
	// 1 GiB region on a 64 KiB mapping made the peer read other memory
	// and crash, over tcp).
	_, err = key.Region(target.Address(), 1<<30)
	require.ErrorIs(t, err, ucs.ErrOutOfRange)
	assert.Contains(t, err.Error(), "outside the peer's 65536-byte mapping")
	_, err = key.Region(target.Address()-1, 8)
	require.ErrorIs(t, err, ucs.ErrOutOfRange)
	_, err = key.Region(^uint64(0), 1)
	require.ErrorIs(t, err, ucs.ErrOutOfRange, "a range that wraps is outside too")
	inner, err := key.Region(target.Address()+4096, 4096)
	require.NoError(t, err)
	assert.Equal(t, 4096, inner.Len())

	// Damaged region bytes are a Go error before UCX sees any.
	for _, bad := range [][]byte{nil, packed[:10], append([]byte("XXXX"), packed[4:]...)} {
		_, err := p.ep.UnpackRegion(waitCtx(t), bad)
		require.ErrorIs(t, err, ucs.ErrInvalidParam)
	}
	// Every single flipped bit is refused by the checksum (a damaged
	// length byte made a region past the mapping, and the owner crashed
	// serving a write in it; a damaged MD map crashed UCX's posix reader).
	for i := range packed {
		for bit := range 8 {
			flipped := bytes.Clone(packed)
			flipped[i] ^= 1 << bit
			_, err := p.ep.UnpackRegion(waitCtx(t), flipped)
			require.ErrorIs(t, err, ucs.ErrInvalidParam, "bit %d of byte %d", bit, i)
		}
	}
	wrapped := bytes.Clone(packed)
	copy(wrapped[12:20], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	_, err = p.ep.UnpackRegion(waitCtx(t), wrapped)
	require.ErrorIs(t, err, ucs.ErrInvalidParam, "a length that wraps the address space")

	msg := []byte("hello, remote memory")
	n, err := region.WriteAt(msg, 100)
	require.NoError(t, err)
	assert.Equal(t, len(msg), n)
	local, err := target.Bytes()
	require.NoError(t, err)
	assert.Equal(t, msg, local[100:100+len(msg)], "WriteAt returns once the bytes are in the peer's memory")

	got := make([]byte, len(msg))
	n, err = region.ReadAt(got, 100)
	require.NoError(t, err)
	assert.Equal(t, len(msg), n)
	assert.Equal(t, msg, got)

	// The io package's helpers work on it.
	sec := io.NewSectionReader(region, 100, int64(len(msg)))
	all, err := io.ReadAll(sec)
	require.NoError(t, err)
	assert.Equal(t, msg, all)

	// Reading across the end reads up to it and says io.EOF.
	tail := make([]byte, 10)
	n, err = region.ReadAt(tail, int64(region.Len()-4))
	assert.Equal(t, 4, n)
	assert.ErrorIs(t, err, io.EOF)

	// Out of bounds is a Go error; nothing reaches UCX.
	_, err = region.WriteAt(msg, int64(region.Len()-3))
	require.ErrorIs(t, err, ucs.ErrOutOfRange)
	_, err = region.Put(msg, -1)
	require.ErrorIs(t, err, ucs.ErrOutOfRange)
	_, err = region.Get(make([]byte, 8), region.Len())
	require.ErrorIs(t, err, ucs.ErrOutOfRange)
	_, err = region.Sub(10, region.Len())
	require.ErrorIs(t, err, ucs.ErrOutOfRange)
	sub, err := region.Sub(100, len(msg))
	require.NoError(t, err)
	req, err := sub.Get(got[:5], 0)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	assert.Equal(t, "hello", string(got[:5]))

	var zero ucp.RemoteRegion
	_, err = zero.ReadAt(got, 0)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)

	// Closing the key ends the region: a clear error, not a crash (and
	// not io.EOF for an empty region).
	empty, err := key.Region(target.Address(), 0)
	require.NoError(t, err)
	require.NoError(t, key.Close())
	_, err = region.WriteAt(msg, 0)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = empty.ReadAt(got, 0)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = key.Region(target.Address(), 8)
	require.ErrorIs(t, err, ucs.ErrClosed, "a closed key makes no regions")
}

// A local region moves bytes between two mappings of this process (the
// importer's path: an imported mapping has no Bytes) with PutMem/GetMem,
// and between a mapping and Go memory with ReadAt/WriteAt.
func TestLocalRegion(t *testing.T) {
	ctx := newContext(t, ucp.WithConfig("TLS", "posix,sysv,self"))
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	defer w.Close()
	far, err := ctx.Allocate(4096)
	require.NoError(t, err)
	defer far.Close()
	near := make([]byte, 4096)
	nearMem, err := ctx.Register(near)
	require.NoError(t, err)
	defer nearMem.Close()

	lr, err := w.LocalRegion(waitCtx(t), far)
	require.NoError(t, err)
	defer func() { require.NoError(t, lr.Close()) }()

	copy(near, "from local memory")
	req, err := lr.PutMem(nearMem.Range(0, 17), 2000)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	farBytes, err := far.Bytes()
	require.NoError(t, err)
	assert.Equal(t, "from local memory", string(farBytes[2000:2017]))

	copy(farBytes[3000:], "back again")
	req, err = lr.GetMem(nearMem.Range(100, 10), 3000)
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	assert.Equal(t, "back again", string(near[100:110]))

	_, err = lr.WriteAt(bytes.Repeat([]byte{7}, 64), 0)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{7}, 64), farBytes[:64])

	// The mapping closed first: the region's operations say so, and the
	// unmap waits for the region's Close (the test's cleanup).
	require.NoError(t, far.Close())
	_, err = lr.WriteAt([]byte("late"), 0)
	require.ErrorIs(t, err, ucs.ErrClosed)
	_, err = lr.GetMem(nearMem.Range(0, 4), 0)
	require.ErrorIs(t, err, ucs.ErrClosed)
}
