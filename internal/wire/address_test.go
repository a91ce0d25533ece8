package wire

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A v2 address by hand: header (version 1, release 2), flags with the
// uuid, the uuid, one device (md 3, LAST, 2-byte device address) with one
// interface (LAST, 2-byte interface address) taking 128 x 64-byte active
// messages, and one without the AM_SYNC flag.
func handV2() []byte {
	b := []byte{0x21, addrFlagWorkerUUID, 1, 2, 3, 4, 5, 6, 7, 8}
	b = append(b, 3, addrDevLast|2, 0xd0, 0xd1)                               // device
	b = append(b, 0xcf, 0x19, 0x0c, 0x01, 0x5a, 0x00, 0x80, 0x00, 0x8b, 0x00) // csum, attrs
	b = append(b, 2, 0xa0, 0xa1)                                              // interface
	b = append(b, 0x47, 0x8b, 0x0c, 0x01, 0x5a, 0x00, 0x00, 0x00, 0x18, 0x00) // no AM
	return append(b, addrIfaceLast|4, 0xb0, 0xb1, 0xb2, 0xb3)
}

func TestWalkWorkerAddress(t *testing.T) {
	b := handV2()
	info, err := WalkWorkerAddress(b)
	require.NoError(t, err)
	want := WorkerAddressInfo{Version: 1, Interfaces: []AddressInterface{
		{TransportCsum: 0x19cf, MDIndex: 3, AMSegment: 128 * 64, DeviceAddr: []byte{0xd0, 0xd1}, IfaceAddr: []byte{0xa0, 0xa1}},
		{TransportCsum: 0x8b47, MDIndex: 3, AMSegment: -1, DeviceAddr: []byte{0xd0, 0xd1}, IfaceAddr: []byte{0xb0, 0xb1, 0xb2, 0xb3}},
	}}
	assert.Empty(t, cmp.Diff(want, info))

	for n := range b {
		_, err := WalkWorkerAddress(b[:n])
		assert.Error(t, err, "cut to %d bytes", n)
	}
	_, err = WalkWorkerAddress(append(bytes.Clone(b), 0))
	assert.ErrorContains(t, err, "1 bytes after the address's end")

	for _, tc := range []struct {
		name string
		at   int
		set  byte
		want string
	}{
		{"version 2", 0, 0x22, "address format version 2"},
		{"endpoint addresses", 24, 0x42, "endpoint addresses"},
		{"zero bandwidth", 17, 0x00, "bandwidth exponent 0"},
		{"NaN latency", 18, 0x0f, "overhead or latency"},
		{"md index 64", 10, 0x40, "memory domain index 64"},
		{"extended md index", 10, 0x7f, "ends at byte"},
	} {
		c := bytes.Clone(b)
		c[tc.at] = tc.set
		_, err := WalkWorkerAddress(c)
		assert.ErrorContains(t, err, tc.want, tc.name)
	}
}

// A device's path count is divided by: zero is refused, one and more taken.
func TestWalkWorkerAddressPaths(t *testing.T) {
	b := handV2()
	for _, paths := range []byte{0, 1, 2} {
		c := append(bytes.Clone(b[:12]), paths)
		c[11] |= addrDevPaths
		_, err := WalkWorkerAddress(append(c, b[12:]...))
		if paths == 0 {
			assert.ErrorContains(t, err, "zero paths")
		} else {
			assert.NoError(t, err, "%d paths", paths)
		}
	}
}

// v2 lengths of 0x1f (device) and 0x3f (interface) and md index 0x7f are
// in the next byte.
func TestWalkWorkerAddressExtended(t *testing.T) {
	dev := bytes.Repeat([]byte{0xd}, 40)
	iface := bytes.Repeat([]byte{0xa}, 70)
	b := []byte{0x21, 0, addrMDMask, 5, addrDevLast | addrDevLenMask, byte(len(dev))}
	b = append(b, dev...)
	b = append(b, 0xcf, 0x19, 0x0c, 0x01, 0x5a, 0x00, 0x80, 0x00, 0x8b, 0x00)
	b = append(b, addrIfaceLast|addrIfaceLenMask, byte(len(iface)))
	b = append(b, iface...)
	info, err := WalkWorkerAddress(b)
	require.NoError(t, err)
	require.Len(t, info.Interfaces, 1)
	assert.Equal(t, 5, info.Interfaces[0].MDIndex)
	assert.Equal(t, dev, info.Interfaces[0].DeviceAddr)
	assert.Equal(t, iface, info.Interfaces[0].IfaceAddr)
}

// v1: one byte of header with the flags, a uuid always, 16-byte attributes
// with floats, no extended bytes; packers up to 1.18 set 0x60 in md
// indices, and a last empty device tells the packer's release.
func TestWalkWorkerAddressV1(t *testing.T) {
	attrs := []byte{0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f, 0, 0, 0, 0} // 1.0, 1.0, 1.0, flags
	b := []byte{0x20, 1, 2, 3, 4, 5, 6, 7, 8}
	b = append(b, 0x40|2, 2, 0xd0, 0xd1, 0xcf, 0x19)
	b = append(b, attrs...)
	b = append(b, addrIfaceLast|2, 0xa0, 0xa1)
	old := append(bytes.Clone(b), addrMDEmpty|2, addrDevLast) // release 18 (2 mod 16)
	info, err := WalkWorkerAddress(old)
	require.NoError(t, err)
	require.Len(t, info.Interfaces, 1)
	assert.Equal(t, 2, info.Interfaces[0].MDIndex, "legacy bits cleared")
	assert.Equal(t, -1, info.Interfaces[0].AMSegment)

	nan := bytes.Clone(old)
	nan[15+4+3] = 0x7f // bandwidth 1.0 -> NaN
	nan[15+4+2] = 0xc0
	_, err = WalkWorkerAddress(nan)
	assert.ErrorContains(t, err, "bandwidth NaN")

	negative := bytes.Clone(old)
	negative[15+3] = 0xbf // overhead 1.0 -> -1.0
	_, err = WalkWorkerAddress(negative)
	assert.ErrorContains(t, err, "overhead -1")
	legacy := bytes.Clone(old)
	legacy[15+4+3] = 0xbf // bandwidth -1.0: what UCX up to 1.11 packed
	_, err = WalkWorkerAddress(legacy)
	assert.NoError(t, err, "negative bandwidth")

	_, err = WalkWorkerAddress([]byte{0x20, 1, 2, 3, 4, 5, 6, 7, 8, addrNoDevices})
	assert.NoError(t, err, "no devices")
}

// The checksums UCX 1.18.1 packed for these transports (read off real
// addresses).
func TestTransportCsum(t *testing.T) {
	for name, want := range map[string]uint16{"tcp": 0x19cf, "posix": 0xd3a7, "sysv": 0x538d, "cma": 0x8b47, "self": 0x7563} {
		assert.Equal(t, want, TransportCsum(name), name)
	}
}

func FuzzWalkWorkerAddress(f *testing.F) {
	f.Add(handV2())
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := WalkWorkerAddress(b)
		if err != nil {
			return
		}
		for _, i := range info.Interfaces {
			if i.MDIndex >= addrMaxMDs {
				t.Fatalf("md index %d taken", i.MDIndex)
			}
		}
	})
}
