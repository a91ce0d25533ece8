package ucp

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"github.com/ucxgo/ucx/internal/wire"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucs"
)

// Keys ucp_rkey_pack wrote on this project's machines (context MDs self,
// tcp, sysv, posix, cma), so that each release's keys are tested on the
// other release too.
var recordedRkeys = []struct {
	name   string
	hex    string
	mdMap  uint64
	sizes  []int
	tailed bool // 1.20+ packer: sys_dev byte after the keys
}{
	{"1.18.1 sysv allocation", "17000000000000000000000c3c80040000d015b8c97f000000", 0x17, []int{0, 0, 12, 0}, false},
	{"1.18.1 posix allocation", "1b0000000000000000000018427100c0020000c0008013b8c97f0000001000000000000000", 0x1b, []int{0, 0, 24, 0}, false},
	{"1.18.1 registered", "130000000000000000000000", 0x13, []int{0, 0, 0}, false},
	{"zero-length mapping", "000000000000000000", 0, nil, false},
	{"1.23.0 sysv allocation", "050000000000000000000c3a00d70200e0c21e737f0000ff", 0x05, []int{0, 12}, true},
	{"1.23.0 posix allocation", "0900000000000000000018615200c0020000c000e0c21e737f00000010000000000000ff", 0x09, []int{0, 24}, true},
	{"1.23.0 registered", "01000000000000000000ff", 0x01, []int{0}, true},
}

// packedRkey is a decoded ucp_rkey_pack buffer.
type packedRkey struct {
	mdMap   uint64
	memType ucs.MemoryType
	keys    [][]byte // one UCT rkey per md_map bit, ascending
	tail    []byte   // the 1.20+ sys_dev part (nil from a 1.18 or 1.19 packer)
}

// parseRkey decodes b with the walker checkRkey uses.
func parseRkey(b []byte) (*packedRkey, error) {
	var keys [][]byte
	tail, err := walkRkey(b, func(_, _ int, key []byte) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &packedRkey{binary.LittleEndian.Uint64(b), ucs.MemoryType(b[8]), keys, tail}, nil
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// keysEnd is where the UCT keys of a parsed rkey end.
func keysEnd(k *packedRkey) int {
	n := wire.RkeyHeaderSize
	for _, key := range k.keys {
		n += 1 + len(key)
	}
	return n
}

func TestParseRecordedRkeys(t *testing.T) {
	for _, r := range recordedRkeys {
		t.Run(r.name, func(t *testing.T) {
			b := mustHex(r.hex)
			k, err := parseRkey(b)
			require.NoError(t, err)
			assert.Equal(t, r.mdMap, k.mdMap)
			var sizes []int
			for _, key := range k.keys {
				sizes = append(sizes, len(key))
			}
			assert.Equal(t, r.sizes, sizes)
			assert.Equal(t, r.tailed, k.tail != nil)
			if r.tailed {
				assert.Equal(t, []byte{wire.RkeySysDevNone}, k.tail)
			}
		})
	}
}

// Every prefix is refused, except the one a 1.18 packer would have written
// for a 1.23 key (the keys without the sys_dev byte).
func TestParseRkeyTruncations(t *testing.T) {
	for _, r := range recordedRkeys {
		b := mustHex(r.hex)
		k, err := parseRkey(b)
		require.NoError(t, err)
		for n := range len(b) {
			_, err := parseRkey(b[:n])
			if r.tailed && n == keysEnd(k) {
				assert.NoError(t, err, "%s: the 1.18 form of the key", r.name)
				continue
			}
			require.ErrorIs(t, err, ucs.ErrInvalidParam, "%s: %d of %d bytes", r.name, n, len(b))
		}
	}
}

func TestParseRkeyFields(t *testing.T) {
	base := mustHex(recordedRkeys[0].hex) // 1.18 sysv: self, tcp, sysv, cma
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(base)) }
	tail := func(t ...byte) []byte { return append(bytes.Clone(base), t...) }
	for _, tc := range []struct {
		name   string
		b      []byte
		reason string // "" = accepted
	}{
		{"an extra md_map bit", with(func(b []byte) []byte { b[0] |= 0x80; return b }), "memory domain 7: size missing"},
		{"a key size one larger", with(func(b []byte) []byte { b[11]++; return b }), "memory domain 4: size missing"},
		{"a key size one smaller", with(func(b []byte) []byte { b[11]--; return b }), "no terminator"},
		{"a key size past the end", with(func(b []byte) []byte { b[11] = 200; return b }), "memory domain 2: 200-byte key overruns the 13 bytes left"},
		{"last known memory type", with(func(b []byte) []byte { b[8] = byte(memoryTypeCount() - 1); return b }), ""},
		{"memory type LAST", with(func(b []byte) []byte { b[8] = byte(memoryTypeCount()); return b }), "unknown memory type"},
		{"memory type 255", with(func(b []byte) []byte { b[8] = 255; return b }), "unknown memory type"},
		{"no md_map but more bytes", append(mustHex("000000000000000000"), 0xff), "without memory domains is 10 bytes"},
		{"unknown sys_dev", tail(0xff), ""},
		{"unknown sys_dev, then a byte", tail(0xff, 0), "1 bytes after the unknown system device"},
		{"sys_dev without terminator", tail(0x05), "no terminator"},
		{"sys_dev with flush bit, no distances", tail(0x85, 0xff), ""},
		{"distances", tail(0x02, 0x00, 0x13, 0x05, 0x01, 0x23, 0x0d, 0xff), ""},
		{"distance truncated", tail(0x02, 0x00, 0x13), "truncated distance"},
		{"distances unterminated", tail(0x02, 0x00, 0x13, 0x05), "no terminator"},
		{"distances, then a byte", tail(0x02, 0x00, 0x13, 0x05, 0xff, 0x00), "1 bytes after the distances"},
		{"distance to device 62", tail(0x02, 62, 0x13, 0x05, 0xff), ""},
		{"distance to device 63", tail(0x02, 63, 0x13, 0x05, 0xff), "device 63"},
		{"distances out of order", tail(0x02, 0x01, 0x13, 0x05, 0x00, 0x13, 0x05, 0xff), "ascending"},
		{"distances repeated", tail(0x02, 0x01, 0x13, 0x05, 0x01, 0x13, 0x05, 0xff), "ascending"},
		{"NaN latency", tail(0x02, 0x00, 0x1f, 0x05, 0xff), "latency exponent 15"},
		{"zero latency", tail(0x02, 0x00, 0x00, 0x05, 0xff), ""},
		{"zero bandwidth", tail(0x02, 0x00, 0x13, 0x00, 0xff), "bandwidth exponent 0"},
		{"denormal bandwidth", tail(0x02, 0x00, 0x13, 0xf0, 0xff), "bandwidth exponent 0"},
		{"NaN bandwidth", tail(0x02, 0x00, 0x13, 0x0f, 0xff), "bandwidth exponent 15"},
		{"a 255-byte key", append(append(mustHex("0100000000000000"+"00"+"ff"), make([]byte, 254)...), 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseRkey(tc.b)
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ucs.ErrInvalidParam)
			assert.Contains(t, err.Error(), tc.reason)
		})
	}
}

// A posix reader asserts on a zero length: any 24+-byte key with zeros
// there is refused, whichever MD it claims to be for.
func TestCheckRkeyPosixLength(t *testing.T) {
	local, err := rkeyLocalInfo()
	require.NoError(t, err)
	if !local.posix {
		t.Skip("no posix memory domain here")
	}
	b := mustHex(recordedRkeys[1].hex) // 1.18 posix: key at 12..36, length at 28..36
	copy(b[12+wire.PosixLengthOffset:], make([]byte, 8))
	err = checkRkeyInPlace(&b)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Contains(t, err.Error(), "key 2: zero where a posix reader takes its segment length")
}

// The size bytes are a packed key's only framing: a part of a size no
// component packs is refused, since the walk that found it has shifted
// later parts onto other readers (a 0 turned 8 gave the System V reader a
// 4-byte part and UCX a SIGSEGV).
func TestCheckRkeyRefusesUnpackedSizes(t *testing.T) {
	key := append(make([]byte, 0, 32), 0x3, 0, 0, 0, 0, 0, 0, 0, byte(ucs.MemoryHost))
	key = append(key, 4, 1, 2, 3, 4, 0)
	err := checkRkeyInPlace(&key)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Contains(t, err.Error(), "key 0 (memory domain 0) is 4 bytes, a size no UCX transport packs")
	for _, n := range []int{0, 8, 12, 14, 16, 24, 40} {
		assert.True(t, wire.RkeyPartSizePacked(n), "size %d", n)
	}
	for _, n := range []int{1, 4, 7, 9, 13, 15, 17, 23} {
		assert.False(t, wire.RkeyPartSizePacked(n), "size %d", n)
	}
}

func TestSanitizedRkeyLayout(t *testing.T) {
	local, err := rkeyLocalInfo()
	require.NoError(t, err)
	for _, r := range recordedRkeys {
		b := mustHex(r.hex)
		orig := bytes.Clone(b)
		require.NoError(t, checkRkeyInPlace(&b))
		require.Equal(t, byte(0), b[len(b)-1], "%s: final NUL", r.name)
		k, err := parseRkey(b[:len(b)-1])
		require.NoError(t, err, "%s: the sanitized key parses", r.name)
		ok, err := parseRkey(orig)
		require.NoError(t, err)
		assert.Equal(t, ok.memType, k.memType)
		// Shared-memory parts naming segments absent here are dropped
		// (the recorded keys' segments are long gone); the rest stay.
		kept := byMD(k)
		for md, want := range byMD(ok) {
			if _, in := kept[md]; !in {
				assert.Contains(t, []int{local.sysvSize, local.posixSize}, len(want),
					"%s: md %d (%d bytes) dropped, but it is no System V or posix part", r.name, md, len(want))
			}
		}
		assert.Zero(t, k.mdMap&^ok.mdMap, "%s: no part added", r.name)
		for md, key := range kept {
			want := byMD(ok)[md]
			assert.Len(t, key, min(max(len(want), local.maxRkey)+1, 255))
			assert.Equal(t, want, key[:len(want)], "%s md %d: original bytes first", r.name, md)
			for _, c := range key[len(want) : len(key)-1] {
				assert.Equal(t, byte(rkeyPadByte), c)
			}
			assert.Equal(t, byte(0), key[len(key)-1], "padding ends with a NUL")
		}
		if r.mdMap != 0 {
			assert.Equal(t, []byte{wire.RkeySysDevNone}, k.tail, "%s: unknown sys_dev present for a 1.20+ reader", r.name)
		}
	}
}

// Random keys (well-formed ones with random contents, then one random byte
// changed in half of them) never panic the parser; whatever it accepts
// sanitizes into a key it accepts again.
func TestParseRkeyRandomBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for range 20000 {
		b := binary.LittleEndian.AppendUint64(nil, rng.Uint64()&0x3f)
		b = append(b, byte(rng.IntN(memoryTypeCount())))
		for m := binary.LittleEndian.Uint64(b); m != 0; m &= m - 1 {
			n := rng.IntN(40)
			b = append(b, byte(n))
			for range n {
				b = append(b, byte(rng.UintN(256)))
			}
		}
		switch rng.IntN(3) {
		case 1:
			b = append(b, wire.RkeySysDevNone)
		case 2:
			b = append(b, byte(rng.IntN(0x80)), 1, 0x13, 0x05, 3, 0x23, 0x0d, wire.RkeySysDevNone)
		}
		if rng.IntN(2) == 0 {
			b[rng.IntN(len(b))] = byte(rng.UintN(256))
		}
		if _, err := parseRkey(b); err != nil {
			require.ErrorIs(t, err, ucs.ErrInvalidParam)
			continue
		}
		accepted++
		c := bytes.Clone(b)
		if err := checkRkeyInPlace(&c); err != nil {
			require.ErrorIs(t, err, ucs.ErrInvalidParam)
			continue
		}
		_, err := parseRkey(c[:len(c)-1])
		require.NoError(t, err)
	}
	t.Logf("%d of 20000 random keys parsed", accepted)
}

// rkeyTestbed is a context with one worker and an endpoint to itself, and
// mappings of each kind whose keys are unpacked and read back for real.
type rkeyTestbed struct {
	ctx *Context
	w   *Worker
	ep  *Endpoint
}

func newRkeyTestbed(t testing.TB) *rkeyTestbed {
	ctx, err := NewContext()
	require.NoError(t, err)
	tb := &rkeyTestbed{ctx: ctx}
	tb.connect(t)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tb.ep.Close(c, CloseForce)
		tb.w.Close()
		tb.ctx.Close()
	})
	return tb
}

// connect makes a worker and an endpoint to it, without peer error
// handling so that shared-memory transports carry the RMA.
func (tb *rkeyTestbed) connect(t testing.TB) {
	var err error
	tb.w, err = tb.ctx.NewWorker()
	require.NoError(t, err)
	addr, err := tb.w.PackAddress()
	require.NoError(t, err)
	tb.ep, err = tb.w.ConnectWorker(addr, WithPeerErrorHandling(false))
	require.NoError(t, err)
}

// reconnect replaces the worker and endpoint (their rkey-configuration
// table is bounded).
func (tb *rkeyTestbed) reconnect(t testing.TB) {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tb.ep.Close(c, CloseForce)
	tb.w.Close()
	tb.connect(t)
}

// get reads n bytes at raddr with the rkey over the testbed's endpoint.
func (tb *rkeyTestbed) get(rk *RemoteKey, raddr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	req, err := tb.ep.rmaBytes("ucp: get", false, b, raddr, rk)
	if err != nil {
		return nil, err
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return b, req.Wait(c)
}

// Keys of real mappings (UCX's allocators: sysv, posix, heap; registered Go
// memory; the zero-length mapping) pass, are sanitized, unpack, and read
// the mapping's bytes back.
func TestRkeyOfRealMappings(t *testing.T) {
	tb := newRkeyTestbed(t)
	for _, prio := range []string{"md:sysv", "md:posix", "heap", "registered", "empty"} {
		t.Run(prio, func(t *testing.T) {
			owner := tb.ctx
			if prio != "registered" && prio != "empty" {
				var err error
				owner, err = NewContext(WithConfig("ALLOC_PRIO", prio))
				require.NoError(t, err)
				defer owner.Close()
			}
			var mem *Mem
			var err error
			switch prio {
			case "registered":
				mem, err = owner.Register(make([]byte, 8192))
			case "empty":
				mem, err = owner.Allocate(0)
			default:
				mem, err = owner.Allocate(8192)
			}
			require.NoError(t, err)
			defer mem.Close()
			data, err := mem.Bytes()
			require.NoError(t, err)
			for i := range data {
				data[i] = byte(i * 13)
			}
			packed, err := mem.PackRemoteKey()
			require.NoError(t, err)
			k, err := parseRkey(packed)
			require.NoError(t, err)
			t.Logf("%s: %d bytes, md_map %#x, key sizes %v", prio, len(packed), k.mdMap, keySizes(k))
			rk, err := tb.ep.UnpackRemoteKey(context.Background(), packed)
			require.NoError(t, err)
			defer rk.Close()
			if len(data) == 0 {
				return
			}
			got, err := tb.get(rk, mem.Address(), len(data))
			require.NoError(t, err)
			require.Equal(t, data, got)
		})
	}
}

func keySizes(k *packedRkey) []int {
	var s []int
	for _, key := range k.keys {
		s = append(s, len(key))
	}
	return s
}

// UCX 1.18.1 hangs in ucp_get_nbx (shared memory, self) or aborts the
// worker (tcp) on a get through a key of another memory type; 1.23 ends
// such a get with an error. So 1.18 builds take host keys only.
func TestRkeyMemoryTypePolicy(t *testing.T) {
	tb := newRkeyTestbed(t)
	mem, err := tb.ctx.Register(make([]byte, 4096))
	require.NoError(t, err)
	defer mem.Close()
	packed, err := mem.PackRemoteKey()
	require.NoError(t, err)
	for mt := ucs.MemoryType(1); mt.KnownByLoaded(); mt++ {
		b := bytes.Clone(packed)
		b[8] = byte(mt)
		rk, err := tb.ep.UnpackRemoteKey(context.Background(), b)
		if ucs.LoadedVersion().Minor < 21 {
			require.ErrorIs(t, err, ucs.ErrInvalidParam)
			assert.Contains(t, err.Error(), "only host memory keys")
			continue
		}
		require.NoError(t, err, "memory type %d", mt)
		_, err = tb.get(rk, mem.Address(), 8)
		t.Logf("memory type %d: get: %v", mt, err)
		require.NotErrorIs(t, err, ucs.ErrTimedOut)
		rk.Close()
	}
}

// Endpoint.UnpackRemoteKey refuses malformed keys before UCX, and the error does
// not carry the key's bytes.
func TestUnpackRkeyRefusesMalformed(t *testing.T) {
	tb := newRkeyTestbed(t)
	b := mustHex(recordedRkeys[0].hex)
	bad := append(bytes.Clone(b), 0x42, 0x43)
	_, err := tb.ep.UnpackRemoteKey(context.Background(), bad)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Contains(t, err.Error(), "ucp: unpack rkey: Invalid parameter: truncated distance")
	assert.NotContains(t, err.Error(), fmt.Sprintf("%x", b[9:]))
	_, err = tb.ep.UnpackRemoteKey(context.Background(), b[:20])
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
}

// BenchmarkCheckRkey is the Go-side cost every Endpoint.UnpackRemoteKey pays.
func BenchmarkCheckRkey(b *testing.B) {
	for _, r := range recordedRkeys[:2] {
		b.Run(r.name, func(b *testing.B) {
			key := mustHex(r.hex)
			b.ReportAllocs()
			for b.Loop() {
				var scratch [rkeyScratchSize]byte
				if _, err := checkRkey(scratch[:0], key, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// checkRkeyInPlace replaces *b with its checked, padded copy.
func checkRkeyInPlace(b *[]byte) error {
	out, err := checkRkey(nil, *b, nil)
	if err == nil {
		*b = out
	}
	return err
}

// memoryTypeCount is UCS_MEMORY_TYPE_LAST of the loaded release.
func memoryTypeCount() int {
	n := 0
	for ucs.MemoryType(n).KnownByLoaded() {
		n++
	}
	return n
}

// byMD maps each part of k to its packer's MD index.
func byMD(k *packedRkey) map[int][]byte {
	out := map[int][]byte{}
	i := 0
	for m := k.mdMap; m != 0; m &= m - 1 {
		out[bits.TrailingZeros64(m)] = k.keys[i]
		i++
	}
	return out
}

// posixSegmentAttaches takes a live posix allocation's key, and not one
// with a flipped segment-id bit, a length past the file, or the HUGETLB
// flag set on a segment of normal pages (the flip that made UCX 1.18.1's
// cleanup of the failed unpack crash: its mmap refuses it, the file is
// there).
func TestPosixSegmentAttaches(t *testing.T) {
	local, err := rkeyLocalInfo()
	require.NoError(t, err)
	if local.posixSize < wire.PosixRkeyFixed {
		t.Skip("no posix memory domain here")
	}
	ctx, err := NewContext(WithConfig("TLS", "posix,self"), WithConfig("ALLOC_PRIO", "md:posix"))
	require.NoError(t, err)
	defer ctx.Close()
	mem, err := ctx.Allocate(8192)
	require.NoError(t, err)
	defer mem.Close()
	packed, err := mem.PackRemoteKey()
	require.NoError(t, err)
	var part []byte
	_, err = walkRkey(packed, func(_, _ int, k []byte) error {
		if len(k) == local.posixSize {
			part = bytes.Clone(k)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotNil(t, part, "a posix part in %x", packed)
	require.True(t, posixSegmentAttaches(local.posixCmpt, part), "the live segment is found")
	// High bits of the id's pid and descriptor fields (procfs form) or of
	// the shm_open id: a name nothing here has. (A flipped low bit may name
	// another process's descriptor, which exists: UCX would map it, as it
	// maps any existing file a key names; see docs/behaviour.md.)
	for _, bit := range []int{22, 25, 29, 50, 55, 59} {
		flipped := bytes.Clone(part)
		flipped[bit/8] ^= 1 << (bit % 8)
		assert.False(t, posixSegmentAttaches(local.posixCmpt, flipped), "segment id bit %d flipped", bit)
	}
	long := bytes.Clone(part)
	binary.LittleEndian.PutUint64(long[wire.PosixLengthOffset:], binary.LittleEndian.Uint64(part[wire.PosixLengthOffset:])+1<<20)
	assert.False(t, posixSegmentAttaches(local.posixCmpt, long), "a length past the file")
	huge := bytes.Clone(part)
	huge[7] ^= 1 << 5 // segment id bit 61, HUGETLB
	assert.False(t, posixSegmentAttaches(local.posixCmpt, huge), "HUGETLB flag on a segment of normal pages")
}
