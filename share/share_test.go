package share_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

var secret = []byte("0123456789abcdef-test-secret")

// hostAddr is where the tests' exporters listen: this machine's address on
// its network (testproc.HostIP), as a host serves its DPU.
var hostAddr = testproc.HostAddr()

func sealer(t testing.TB) share.Sealer {
	s, err := share.NewHMACSealer(secret)
	require.NoError(t, err)
	return s
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// serve starts an exporter serving on loopback; it is closed when the
// test ends.
func serve(t testing.TB, opts ...share.ExporterOption) (*share.Exporter, string) {
	t.Helper()
	e, err := share.NewExporter(sealer(t), opts...)
	require.NoError(t, err)
	l, err := net.Listen("tcp", hostAddr)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.Serve(l) }()
	t.Cleanup(func() {
		assert.NoError(t, e.Close())
		if err := <-done; err != nil { // Serve started after Close
			assert.ErrorIs(t, err, ucs.ErrClosed)
		}
	})
	return e, l.Addr().String()
}

// memory is shareable memory holding a copy of b, closed when the test
// ends. Make it before the exporter that shares it (before serve): cleanups
// run last first, and a Memory closes only once no exporter shares it.
func memory(t testing.TB, b []byte) *share.Memory {
	t.Helper()
	m, err := share.NewMemory(len(b))
	require.NoError(t, err)
	copy(m.Bytes(), b)
	t.Cleanup(func() { assert.NoError(t, m.Close(), "closing the test's Memory") })
	return m
}

func dial(t testing.TB, addr string, opts ...share.ImporterOption) *share.Importer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	imp, err := share.Dial(ctx, "tcp", addr, sealer(t), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { imp.Close() })
	return imp
}

func TestReadWriteTwoRegions(t *testing.T) {
	ma, mb := memory(t, pattern(1<<20, 1)), memory(t, pattern(64<<10, 9))
	a, b := ma.Bytes(), mb.Bytes()
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", ma, share.ReadWrite))
	require.NoError(t, e.Add(context.Background(), "b", mb, share.ReadOnly))
	imp := dial(t, addr)
	rs := imp.Regions()
	require.Len(t, rs, 2)
	assert.Equal(t, "a", rs[0].ID())
	assert.Equal(t, len(a), rs[0].Len())

	got := make([]byte, len(a))
	n, err := rs[0].ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, len(a), n)
	require.True(t, bytes.Equal(a, got))

	w := pattern(300<<10, 77)
	n, err = rs[0].WriteAt(w, 5000)
	require.NoError(t, err)
	require.Equal(t, len(w), n)
	require.True(t, bytes.Equal(w, a[5000:5000+len(w)]))

	// Past the end: a short read with io.EOF; a write that does not fit
	// writes nothing; b is read-only.
	n, err = rs[1].ReadAt(make([]byte, 100), int64(len(b)-10))
	assert.Equal(t, 10, n)
	assert.ErrorContains(t, err, "EOF")
	assert.Equal(t, share.ReadWrite, rs[0].Access())
	assert.Equal(t, share.ReadOnly, rs[1].Access())
	_, err = rs[1].WriteAt([]byte{1}, 0)
	assert.ErrorIs(t, err, share.ErrAccess)
	assert.ErrorContains(t, err, "read-only")
	_, err = rs[0].WriteAt(make([]byte, 10), int64(len(a)-5))
	assert.ErrorIs(t, err, ucs.ErrOutOfRange)

	st := imp.Stats()
	assert.Equal(t, int64(len(a)+10), st.BytesRead)
	assert.Equal(t, int64(len(w)), st.BytesWritten)

	require.NoError(t, imp.Close())
	require.Eventually(t, func() bool { return e.Stats().Importers == 0 }, 5*time.Second, 10*time.Millisecond)
	_, err = rs[0].ReadAt(got, 0)
	assert.ErrorIs(t, err, share.ErrRevoked)
}

func TestRevokeWaitsForAcknowledgement(t *testing.T) {
	mem := memory(t, pattern(256<<10, 3))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	imp := dial(t, addr)
	r, err := imp.Region("a")
	require.NoError(t, err)
	_, err = r.ReadAt(make([]byte, 10), 0)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, errOf(e.Revoke(ctx)))
	select {
	case <-imp.Revoked():
	case <-time.After(5 * time.Second):
		t.Fatal("the importer was not told")
	}
	_, err = r.ReadAt(make([]byte, 10), 0)
	assert.ErrorIs(t, err, share.ErrRevoked)
	st := e.Stats()
	assert.Equal(t, int64(1), st.Acks)
	assert.Equal(t, int64(0), st.Forced)
}

func TestWrongSecretRefused(t *testing.T) {
	mem := memory(t, pattern(4096, 1))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	other, err := share.NewHMACSealer([]byte("another secret of enough length"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = share.Dial(ctx, "tcp", addr, other)
	require.Error(t, err)
	assert.True(t, errors.Is(err, share.ErrSeal), "%v", err)
	assert.NotContains(t, err.Error(), string(secret))
	assert.Eventually(t, func() bool { return e.Stats().Refused == 1 }, 5*time.Second, 10*time.Millisecond)
}

func listen(t testing.TB) net.Listener {
	l, err := net.Listen("tcp", hostAddr)
	require.NoError(t, err)
	return l
}

// errOf is the error of a revocation's call (Remove, Rotate, Revoke), for
// tests that look at the error alone.
func errOf(_ share.Revocation, err error) error { return err }
