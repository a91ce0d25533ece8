package ucp_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// descriptorView is everything a Descriptor reports.
type descriptorView struct {
	Dummy                                      bool
	Flags                                      uint16
	MDMap, Address, Length, ContextUUID, RegID uint64
	MemoryType                                 ucs.MemoryType
	MDs                                        []ucp.DescriptorMD
}

func viewOf(d *ucp.Descriptor) descriptorView {
	return descriptorView{d.Dummy(), d.Flags(), d.MDMap(), d.Address(), d.Length(),
		d.ContextUUID(), d.RegID(), d.MemoryType(), d.MDs()}
}

// What Import checks is what UCX would get: a parsed descriptor has no
// field a caller can write, what its methods return are copies, and the
// bytes it was parsed from are its own. Whatever a caller does to them, the
// descriptor reports what was parsed and Import refuses the foreign
// descriptor as before (an honest one of an "ib" memory domain this
// machine does not have: "no matching MD"), never handing it to UCX.
func TestParsedDescriptorCannotBeTamperedWith(t *testing.T) {
	ctx := newContext(t, ucp.WithFeatures(ucp.FeatureRMA|ucp.FeatureExportedMemh))
	refused := func(d *ucp.Descriptor) {
		t.Helper()
		m, err := ctx.Import(d)
		if err == nil {
			m.Close()
		}
		require.ErrorIs(t, err, ucs.ErrUnreachable)
		assert.Contains(t, err.Error(), "no matching MD")
	}

	typ := reflect.TypeFor[ucp.Descriptor]()
	for i := range typ.NumField() {
		assert.False(t, typ.Field(i).IsExported(), "Descriptor.%s can be written by a caller", typ.Field(i).Name)
	}

	for _, size := range []int{6, 14} {
		wire := sampleDescriptor(size)
		d, err := ucp.ParseDescriptor(wire)
		require.NoError(t, err)
		want := viewOf(d)
		require.False(t, want.Dummy)
		require.Len(t, want.MDs, 1)
		refused(d)

		// The caller's bytes, made to start like the zero-length dummy
		// (which UCX would take without a device check).
		wire[0], wire[1], wire[2] = 0, 0, 0
		assert.Equal(t, want, viewOf(d))
		refused(d)

		// The memory-domain entries handed out, changed every way.
		mds := d.MDs()
		mds[0].Mkey[0] ^= 0xff
		mds[0].GlobalID[0] = 'x'
		mds[0] = ucp.DescriptorMD{}
		assert.Equal(t, want, viewOf(d))
		refused(d)

		// A copy of the descriptor is the same descriptor.
		cp := *d
		assert.Equal(t, want, viewOf(&cp))
		refused(&cp)
	}

	// One not made by ParseDescriptor is refused before any check.
	_, err := ctx.Import(&ucp.Descriptor{})
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	_, err = ctx.Import(nil)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	var none *ucp.Descriptor
	assert.Equal(t, descriptorView{}, viewOf(none), "a nil descriptor reports zero values")

	// The dummy reports no memory domains, and an imported mapping reports
	// the descriptor it was made from.
	d, err := ucp.ParseDescriptor([]byte{0, 0, 0})
	require.NoError(t, err)
	assert.Equal(t, descriptorView{Dummy: true}, viewOf(d))
	m, err := ctx.Import(d)
	require.NoError(t, err)
	assert.Same(t, d, m.Descriptor())
	require.NoError(t, m.Close())
}
