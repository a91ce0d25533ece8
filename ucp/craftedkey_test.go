package ucp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucp"
)

// keyPart is one memory domain's part of a packed key.
type keyPart struct {
	md  int
	key []byte
}

// splitKey cuts a well-formed packed key into its parts and its tail.
func splitKey(t *testing.T, b []byte) (parts []keyPart, tail []byte) {
	tail, err := wire.WalkRkey(b, func(_, md int, k []byte) error {
		parts = append(parts, keyPart{md, bytes.Clone(k)})
		return nil
	})
	require.NoError(t, err)
	return parts, tail
}

// joinKey packs parts (in order, sizes as they are) behind md map mdMap.
func joinKey(mdMap uint64, memType byte, parts []keyPart, tail []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, mdMap)
	out = append(out, memType)
	for _, p := range parts {
		out = append(out, byte(len(p.key)))
		out = append(out, p.key...)
	}
	return append(out, tail...)
}

// craftedKeys are keys a peer can make from its real key b with a few
// edits that keep the format: a part emptied, cut, or given another
// part's bytes (so that a reader meets bytes of another transport), a part
// of every size a transport here packs, an MD map changed in one or two
// of its low bits, a size byte changed to any value.
func craftedKeys(t *testing.T, b []byte) map[string][]byte {
	parts, tail := splitKey(t, b)
	mdMap, memType := binary.LittleEndian.Uint64(b), b[8]
	out := map[string][]byte{}
	with := func(i int, k []byte) []byte {
		ps := append([]keyPart(nil), parts...)
		ps[i].key = k
		return joinKey(mdMap, memType, ps, tail)
	}
	for i, p := range parts {
		for _, n := range []int{0, 1, 4, 8, 12, 16, 24, 32} {
			k := make([]byte, n)
			copy(k, p.key)
			out[fmt.Sprintf("part %d (md %d) as %d bytes", i, p.md, n)] = with(i, k)
			for j := range k {
				k[j] = 0xff
			}
			out[fmt.Sprintf("part %d (md %d) as %d bytes of 0xff", i, p.md, n)] = with(i, bytes.Clone(k))
		}
		for j, q := range parts {
			if j != i {
				out[fmt.Sprintf("part %d (md %d) with part %d's bytes", i, p.md, j)] = with(i, q.key)
			}
		}
	}
	for a := range 8 {
		for c := a; c < 8; c++ {
			flipped := bytes.Clone(b)
			flipped[0] ^= 1<<a | 1<<c
			out[fmt.Sprintf("md map bits %d and %d flipped", a, c)] = flipped
		}
	}
	off := wire.RkeyHeaderSize
	for _, p := range parts {
		for v := range len(b) {
			d := bytes.Clone(b)
			d[off] = byte(v)
			out[fmt.Sprintf("size byte of md %d set to %d", p.md, v)] = d
		}
		off += 1 + len(p.key)
	}
	return out
}

// TestCraftedKeyParts: what a peer can craft from its real key, fed to
// UnpackRemoteKey, and a get through every key that unpacks. Each shape
// here crashed UCX 1.16 to 1.18 inside ucp_ep_rkey_unpack's cleanup
// before the endpoint asked UCX which reader each part meets (an empty
// part where the peer's posix MD is: 5 of 5 runs on 1.16.0 and 1.18.1; a
// size byte raised by two bits: 10 of 10). The answer may be an error or
// a key: never a crash.
func TestCraftedKeyParts(t *testing.T) {
	for _, tls := range []string{"posix,sysv,self", "posix,sysv,self,tcp"} {
		for _, prio := range []string{"md:posix", "md:sysv"} {
			t.Run(tls+"/"+prio, func(t *testing.T) {
				p := newPair(t, onTLS(tls), withPeerErr(false), withContext(ucp.WithConfig("ALLOC_PRIO", prio)), runServer())
				unpackCraftedKeys(t, p.ctx, p.ep)
			})
		}
	}
	// Through a listener the peer's address is never seen by the binding.
	t.Run("listener/md:posix", func(t *testing.T) {
		p := newPair(t, onTLS("posix,sysv,self,tcp"), withContext(ucp.WithConfig("ALLOC_PRIO", "md:posix")), viaListener(), runClient())
		runWorker(t, p.server)
		unpackCraftedKeys(t, p.ctx, p.ep)
	})
}

// unpackCraftedKeys feeds ep the crafted keys of a mapping of ctx and gets
// through those that unpack.
func unpackCraftedKeys(t *testing.T, ctx *ucp.Context, ep *ucp.Endpoint) {
	mem, err := ctx.Allocate(4096)
	require.NoError(t, err)
	defer mem.Close()
	packed, err := mem.PackRemoteKey()
	require.NoError(t, err)
	unpacked := 0
	crafted := craftedKeys(t, packed)
	for name, key := range crafted {
		rk, err := ep.UnpackRemoteKey(waitCtx(t), key)
		if err != nil {
			continue
		}
		unpacked++
		buf := make([]byte, 8)
		gctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := getAt(buf, mem.Address(), rk)
		if err == nil {
			_ = req.Wait(gctx)
		}
		cancel()
		require.NoError(t, rk.Close(), name)
	}
	t.Logf("%d crafted keys from %x: %d unpacked, the rest refused", len(crafted), packed, unpacked)
}
