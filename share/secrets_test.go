package share_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/share"
)

// tap is a proxy between an importer and the exporter that keeps every
// grant frame it forwards and, when flip is set, alters one bit of the
// first grant.
type tap struct {
	l      net.Listener
	mu     sync.Mutex
	grants [][]byte
	flip   bool
}

// newTap relays l's connections (an address the exporter was told
// importers dial: share.WithDialAddresses) to exporter.
func newTap(t *testing.T, l net.Listener, exporter string, flip bool) *tap {
	tp := &tap{l: l, flip: flip}
	go func() {
		for {
			ci, err := tp.l.Accept()
			if err != nil {
				return
			}
			ce, err := net.Dial("tcp", exporter)
			if err != nil {
				ci.Close()
				return
			}
			go func() { io.Copy(ce, ci); ce.Close() }()
			go func() {
				defer ci.Close()
				for {
					typ, p, err := rawRead(ce)
					if err != nil {
						return
					}
					if typ == 4 {
						tp.mu.Lock()
						tp.grants = append(tp.grants, append([]byte(nil), p...))
						if tp.flip && len(tp.grants) == 1 {
							p[len(p)/3] ^= 0x10
						}
						tp.mu.Unlock()
					}
					if rawWrite(ci, typ, p) != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { tp.l.Close() })
	return tp
}

// The sealing secret, the sealed grants and the keys inside them never
// appear in what the package says: errors of a wrong secret, an altered
// grant, an expired lease, a revocation, the session's end, and the
// counters published through expvar.
func TestSecretsNotInErrorsOrStats(t *testing.T) {
	var texts []string
	add := func(what string, v any) {
		if v != nil {
			texts = append(texts, fmt.Sprintf("%s: %v %+v", what, v, v))
		}
	}
	mem := memory(t, pattern(64<<10, 1))
	goodL, badL := listen(t), listen(t)
	e, addr := serve(t, share.WithLease(400*time.Millisecond), share.WithExpvarName("secrets"),
		share.WithDialAddresses(goodL.Addr().String(), badL.Addr().String()))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A good session through the tap: its grants are what must not show.
	good := newTap(t, goodL, addr, false)
	imp, err := share.Dial(ctx, "tcp", good.l.Addr().String(), sealer(t), share.WithExpvarName("secrets"))
	require.NoError(t, err)
	r, err := imp.Region("a")
	require.NoError(t, err)
	_, err = r.ReadAt(make([]byte, 16), 0)
	require.NoError(t, err)
	stats, err := json.Marshal(struct {
		E share.ExporterStats
		I share.ImporterStats
	}{e.Stats(), imp.Stats()})
	require.NoError(t, err)
	add("stats", string(stats))
	<-r.Revoked() // the lease ends
	_, err = r.ReadAt(make([]byte, 16), 0)
	add("read after expiry", err)
	add("region", r.Err())
	require.NoError(t, imp.Close())
	add("importer after close", imp.Err())

	// A wrong secret, and an altered grant.
	other, err := share.NewHMACSealer([]byte("another secret of enough length"))
	require.NoError(t, err)
	_, err = share.Dial(ctx, "tcp", addr, other)
	add("wrong secret", err)
	bad := newTap(t, badL, addr, true)
	_, err = share.Dial(ctx, "tcp", bad.l.Addr().String(), sealer(t))
	require.Error(t, err)
	add("altered grant", err)
	require.Eventually(t, func() bool { return len(e.Sessions()) == 0 }, 5*time.Second, 10*time.Millisecond)

	require.NotEmpty(t, good.grants)
	all := strings.Join(texts, "\n")
	assert.Empty(t, leakcheck.Exposed(all, secret), "the sealing secret")
	for i, g := range append(good.grants, bad.grants...) {
		// From the generation on: the first 46 bytes (magic, format,
		// release, mode, the exporter's and the session's ids) are no
		// secret, and the session id is in the Stats on purpose.
		assert.Empty(t, leakcheck.Exposed(all, g[46:]), "sealed grant %d", i)
		// The packed key is the grant's last part, before the MAC: its
		// 16-byte runs are covered by the grant's.
	}
}
