package ucp_test

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// sampleDescriptor builds what a UCX 1.16+ exporter with one mlx5 "ib"
// memory domain writes: the 44-byte header, then one entry of the given
// mkey size and a 10-byte global id ("ib" + an 8-byte system image GUID).
func sampleDescriptor(mkeySize int) []byte {
	le := binary.LittleEndian
	b := make([]byte, 44)
	b[0] = 43
	le.PutUint16(b[1:], 1)    // exported
	le.PutUint64(b[3:], 1<<2) // exporter's md index 2
	b[11] = 0                 // host memory
	le.PutUint64(b[12:], 0x7f0000001000)
	le.PutUint64(b[20:], 1<<20)
	le.PutUint64(b[28:], 0x1122334455667788)
	le.PutUint64(b[36:], 42)
	gid := []byte{'i', 'b', 0xb8, 0xce, 0xf6, 0x03, 0x00, 0x12, 0x34, 0x56}
	entry := []byte{byte(mkeySize + len(gid) + 3 - 1), byte(mkeySize)}
	for i := range mkeySize {
		entry = append(entry, byte(0x10+i))
	}
	entry = append(entry, byte(len(gid)))
	entry = append(entry, gid...)
	return append(b, entry...)
}

func TestParseDescriptor(t *testing.T) {
	for _, s := range []int{6, 14} {
		b := sampleDescriptor(s)
		d, err := ucp.ParseDescriptor(b)
		require.NoError(t, err)
		assert.Equal(t, uint64(0x7f0000001000), d.Address())
		assert.Equal(t, uint64(1<<20), d.Length())
		assert.Equal(t, uint64(4), d.MDMap())
		require.Len(t, d.MDs(), 1)
		assert.Len(t, d.MDs()[0].Mkey, s)
		assert.Equal(t, []byte("ib"), d.MDs()[0].GlobalID[:2])
		assert.False(t, d.Dummy())
	}
}

// Every truncation of a valid descriptor is refused.
func TestParseDescriptorTruncations(t *testing.T) {
	b := sampleDescriptor(6)
	for n := range len(b) {
		_, err := ucp.ParseDescriptor(b[:n])
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "truncated to %d bytes", n)
	}
	_, err := ucp.ParseDescriptor(append(b, 0))
	require.ErrorIs(t, err, ucs.ErrInvalidParam, "one byte too many")
}

// Every value but the valid one of each header and length field is refused.
func TestParseDescriptorCorruptions(t *testing.T) {
	b := sampleDescriptor(6)
	entry := 44
	fields := map[string]int{
		"header size": 0, "flags lo": 1, "flags hi": 2,
		"entry size": entry, "mkey size": entry + 1, "global id size": entry + 8,
	}
	for name, off := range fields {
		for v := range 256 {
			if byte(v) == b[off] {
				continue
			}
			c := append([]byte(nil), b...)
			c[off] = byte(v)
			_, err := ucp.ParseDescriptor(c)
			require.ErrorIs(t, err, ucs.ErrInvalidParam, "%s (offset %d) = %#x", name, off, v)
		}
	}
	// MD map: any change of the number of memory domains.
	for bit := range 64 {
		c := append([]byte(nil), b...)
		binary.LittleEndian.PutUint64(c[3:], binary.LittleEndian.Uint64(c[3:])^(1<<bit))
		if binary.LittleEndian.Uint64(c[3:])&(1<<2) == 0 && bit != 2 {
			continue
		}
		_, err := ucp.ParseDescriptor(c)
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "md map bit %d flipped", bit)
	}
	// Memory type out of range, length zero, address wrap.
	for _, mod := range []func([]byte){
		func(c []byte) { c[11] = 200 },
		func(c []byte) { binary.LittleEndian.PutUint64(c[20:], 0) },
		func(c []byte) { binary.LittleEndian.PutUint64(c[12:], ^uint64(0)) },
		func(c []byte) { c[len(c)-1] = 0 }, // trailing zero in the global id
	} {
		c := append([]byte(nil), b...)
		mod(c)
		_, err := ucp.ParseDescriptor(c)
		require.ErrorIs(t, err, ucs.ErrInvalidParam)
	}
}

func TestParseDescriptorRandomBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		b := make([]byte, rng.IntN(200))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if len(b) > 0 && i%2 == 0 {
			b[0] = 43 // get past the first check half the time
		}
		_, err := ucp.ParseDescriptor(b)
		require.Error(t, err, "random bytes %x", b)
	}
}

func TestParseDummyOnlyAtExactLength(t *testing.T) {
	d, err := ucp.ParseDescriptor([]byte{0, 0, 0})
	require.NoError(t, err)
	assert.True(t, d.Dummy())
	for _, b := range [][]byte{{}, {0}, {0, 0}, {0, 0, 0, 0}, append(make([]byte, 3), sampleDescriptor(6)...)} {
		_, err := ucp.ParseDescriptor(b)
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "%x", b)
	}
}
