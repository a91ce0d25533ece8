package ucp_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// A zero-length mapping exports under the rule of any other: where no
// memory domain can export (as here), Export is ucs.ErrUnsupported with
// the same text, not UCX's 3-byte dummy; where one can, the dummy.
func TestZeroLengthExport(t *testing.T) {
	ctx := newContext(t)
	empty, err := ctx.Allocate(0)
	require.NoError(t, err)
	defer empty.Close()
	require.Zero(t, empty.Len())
	desc, err := empty.Export()
	if uct.HaveExportedMkey() == nil {
		require.NoError(t, err)
		require.Equal(t, []byte{0, 0, 0}, desc)
		return
	}
	require.Nil(t, desc)
	require.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.Equal(t, "ucp: export memory handle: Unsupported operation: no memory domain of the mapping has UCT_MD_FLAG_EXPORTED_MKEY", err.Error())
	dst := []byte("kept")
	got, err := empty.AppendExport(dst)
	require.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.Equal(t, dst, got)
}

// The README's host pattern (try Export, fall back to PackRegion on
// ucs.ErrUnsupported) works for every length, 0 included, and the peer
// gets the whole mapping either way.
func TestExportFallbackEveryLength(t *testing.T) {
	p := newPair(t, onTLS("posix,sysv,self"), withPeerErr(false), runServer())
	for _, n := range []int{0, 4096} {
		mem := p.allocate(t, n)
		key, err := mem.Export()
		export := true
		if errors.Is(err, ucs.ErrUnsupported) {
			export = false
			key, err = mem.PackRegion()
		}
		require.NoError(t, err, "length %d", n)
		if export { // a machine whose memory domains can export
			d, err := ucp.ParseDescriptor(key)
			require.NoError(t, err, "length %d", n)
			assert.Equal(t, n == 0, d.Dummy())
			continue
		}
		region, err := p.ep.UnpackRegion(waitCtx(t), key)
		require.NoError(t, err, "length %d", n)
		assert.Equal(t, mem.Address(), region.Address())
		assert.Equal(t, mem.Len(), region.Len())
		if n > 0 {
			_, err = region.WriteAt([]byte("fallback"), 16)
			require.NoError(t, err)
			b, err := mem.Bytes()
			require.NoError(t, err)
			assert.Equal(t, "fallback", string(b[16:24]))
		}
		require.NoError(t, region.Key().Close())
	}
}
