package ucp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/ucxgo/ucx/internal/wire"
	"os"
	"testing"

	"github.com/ucxgo/ucx/ucs"
)

// rkeySandbox is what the fuzz target lets real UCX read: shared-memory
// keys name OS objects (a sysv shmid, a posix /proc/PID/fd or /dev/shm
// name) that UCX attaches with this process's rights, so fuzzed bytes reach
// ucp_ep_rkey_unpack only when every shared-memory key names a segment the
// test itself made. (A fuzzed shmid attaches any segment the user can; and
// a failing shared-memory unpack makes UCX 1.18.1 release stale slots of a
// recycled rkey: a bug fixed in 1.19.)
type rkeySandbox struct {
	sysvMD, posixMD int               // context MD indices (-1: none)
	sysv            map[string]uint64 // shmid bytes -> owner address
	posix           map[string]rkeySeg
	plain           uint64 // an owned region no shared-memory MD mapped
}

type rkeySeg struct{ addr, length uint64 }

// learn records the MD indices and segments of a real packed key.
func (s *rkeySandbox) learn(t testing.TB, packed []byte) {
	k, err := parseRkey(packed)
	if err != nil {
		t.Fatalf("a real key does not parse: %v", err)
	}
	i := 0
	for m := k.mdMap; m != 0; m &= m - 1 {
		md, key := trailing(m), k.keys[i]
		i++
		switch len(key) {
		case 12:
			s.sysvMD = md
			s.sysv[string(key[:4])] = binary.LittleEndian.Uint64(key[4:])
		case wire.PosixRkeyFixed:
			s.posixMD = md
			le := binary.LittleEndian
			s.posix[string(key[:8])] = rkeySeg{le.Uint64(key[8:]), le.Uint64(key[16:])}
		}
	}
}

func trailing(m uint64) int {
	n := 0
	for m&1 == 0 {
		m >>= 1
		n++
	}
	return n
}

// allows reports whether UCX may unpack k, and the owned region a get
// through it reads correctly (0: none). Shared-memory readers turn the key's
// owner address into an offset, so a get is only safe when every
// shared-memory key names the same owned region at its real address; a key
// without any reads raddr directly (self, tcp, cma).
func (s *rkeySandbox) allows(k *packedRkey) (ok bool, region uint64) {
	le := binary.LittleEndian
	region = s.plain
	shm := 0
	i := 0
	for m := k.mdMap; m != 0; m &= m - 1 {
		md, key := trailing(m), k.keys[i]
		i++
		var at uint64
		switch md {
		case s.sysvMD:
			owner, mine := s.sysv[string(key[:min(4, len(key))])]
			if len(key) < 12 || !mine {
				return false, 0
			}
			if owner == le.Uint64(key[4:]) {
				at = owner
			}
		case s.posixMD:
			seg, mine := s.posix[string(key[:min(8, len(key))])]
			if len(key) < wire.PosixRkeyFixed || !mine {
				return false, 0
			}
			if l := le.Uint64(key[16:]); l == 0 || l > seg.length {
				return false, 0
			}
			if le.Uint64(key[8:]) == seg.addr {
				at = seg.addr
			}
		default:
			continue
		}
		if shm++; shm > 1 || at == 0 {
			region = 0
		} else {
			region = at
		}
	}
	return true, region
}

// FuzzUnpackRkey feeds foreign bytes to Endpoint.UnpackRemoteKey: malformed keys
// must be refused in Go (ucs.ErrInvalidParam); well-formed ones whose
// shared-memory parts name the test's own segments go to the real
// ucp_ep_rkey_unpack on an endpoint to this worker, and a key that names an
// owned region reads it with a real get. Nothing may crash or hang.
func FuzzUnpackRkey(f *testing.F) {
	for _, r := range recordedRkeys {
		f.Add(mustHex(r.hex))
	}
	tb := newRkeyTestbed(f)
	sb := &rkeySandbox{sysvMD: -1, posixMD: -1, sysv: map[string]uint64{}, posix: map[string]rkeySeg{}}
	for _, prio := range []string{"md:sysv", "md:posix", "heap"} {
		owner, err := NewContext(WithConfig("ALLOC_PRIO", prio))
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { owner.Close() })
		mem, err := owner.Allocate(4096)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { mem.Close() })
		packed, err := mem.PackRemoteKey()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(packed)
		sb.learn(f, packed)
		if prio == "heap" {
			sb.plain = mem.Address()
		}
	}
	var stats fuzzStats
	f.Cleanup(func() { stats.write(os.Getenv("UCXGO_FUZZ_STATS")) })
	f.Fuzz(func(t *testing.T, b []byte) {
		k, perr := parseRkey(b)
		if perr != nil {
			_, err := tb.ep.UnpackRemoteKey(context.Background(), b)
			if len(b) > 0 && !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("a malformed key was not refused: %v (%v)", err, perr)
			}
			return
		}
		c := bytes.Clone(b)
		if err := checkRkeyInPlace(&c); err != nil {
			return // refused for a posix reader's sake
		}
		if again, err := parseRkey(c[:len(c)-1]); err != nil || again.mdMap&^k.mdMap != 0 {
			t.Fatalf("the sanitized key does not parse back to a part of the key: %v", err)
		}
		ok, region := sb.allows(k)
		if !ok {
			return
		}
		rk, err := tb.ep.UnpackRemoteKey(context.Background(), b)
		if errors.Is(err, ucs.ErrExceedsLimit) {
			// The worker's table of rkey configurations (128 on UCX 1.18)
			// is full of fuzzed memory types and MD maps: start afresh.
			tb.reconnect(t)
			return
		}
		if err != nil {
			return
		}
		defer rk.Close()
		stats.unpacked++
		if region == 0 {
			return
		}
		stats.got++
		_, err = tb.get(rk, region, 8)
		switch {
		case errors.Is(err, ucs.ErrTimedOut):
			t.Fatalf("a get through a key UCX unpacked never completed")
		case err != nil && k.memType == ucs.MemoryHost:
			t.Fatalf("a get of host memory through an owned key failed: %v", err)
		}
		// Another memory type (1.19+ builds only) may fail; it must end.
	})
}

// fuzzStats counts how far fuzzed keys went, written to $UCXGO_FUZZ_STATS
// when set (the fuzzing engine hides a worker's output).
type fuzzStats struct{ unpacked, got int }

func (s *fuzzStats) write(path string) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "unpacked by UCX %d, read through with a get %d\n", s.unpacked, s.got)
}
