package share_test

// Tests written by a newcomer from the README section "Sharing memory with a
// DPU" and the package godoc only: the public API used in the order a
// service author would write it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// newcomerService is what a host service would keep: its exporter, the
// memory it shares and where it serves.
type newcomerService struct {
	exp     *share.Exporter
	l       net.Listener
	buffers map[string]*share.Memory
	served  chan error
}

// newNewcomerService shares regions; the test closes svc.exp (its Memory,
// from memory, closes when the test ends, after that).
func newNewcomerService(t *testing.T, s share.Sealer, regions map[string]*share.Memory, opts ...share.ExporterOption) *newcomerService {
	t.Helper()
	exp, err := share.NewExporter(s, opts...)
	require.NoError(t, err)
	for id, m := range regions {
		require.NoError(t, exp.Add(context.Background(), id, m, share.ReadWrite))
	}
	l, err := net.Listen("tcp", hostAddr)
	require.NoError(t, err)
	svc := &newcomerService{exp: exp, l: l, buffers: regions, served: make(chan error, 1)}
	go func() { svc.served <- exp.Serve(l) }()
	return svc
}

func (s *newcomerService) addr() string { return s.l.Addr().String() }

// newcomerClient is what the DPU side would keep: the importer and its
// regions by id.
type newcomerClient struct {
	imp     *share.Importer
	regions map[string]*share.Region
}

func newNewcomerClient(t *testing.T, ctx context.Context, addr string, s share.Sealer) *newcomerClient {
	t.Helper()
	imp, err := share.Dial(ctx, "tcp", addr, s)
	require.NoError(t, err)
	c := &newcomerClient{imp: imp, regions: map[string]*share.Region{}}
	for _, r := range imp.Regions() {
		c.regions[r.ID()] = r
	}
	return c
}

// newcomerExporter is an exporter that does not serve. The helper serve(t)
// fails a test that never dials: its cleanup closes the exporter, and when
// Close runs before the `go exp.Serve(l)` goroutine got to Serve, Serve
// returns "the exporter is closed", which the helper requires to be nil
// (the race of TestNewcomerServeAfterCloseLeavesListenerOpen).
func newcomerExporter(t *testing.T) *share.Exporter {
	exp, err := share.NewExporter(sealer(t))
	require.NoError(t, err)
	t.Cleanup(func() { exp.Close() })
	return exp
}

func newcomerCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// isShareError checks the documented shape: an *ucs.Error wrapping want.
func isShareError(t *testing.T, err error, want error) {
	t.Helper()
	require.Error(t, err)
	var ue *ucs.Error
	assert.True(t, errors.As(err, &ue), "error %v (%T) is not a *ucs.Error", err, err)
	assert.ErrorIs(t, err, want, "error: %v", err)
}

// A newcomer serves on 127.0.0.1. It works, except on UCX 1.20, whose
// tcp transport cannot reach a loopback device of another process: there
// the session is refused with a reason that says so and what to do, and
// the exporter goes on serving.
func TestNewcomerLoopbackControl(t *testing.T) {
	s := sealer(t)
	m := memory(t, pattern(4096, 3))
	want := append([]byte(nil), m.Bytes()...)
	exp, err := share.NewExporter(s)
	require.NoError(t, err)
	defer exp.Close()
	require.NoError(t, exp.Add(context.Background(), "a", m, share.ReadOnly))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go exp.Serve(l)
	imp, err := share.Dial(newcomerCtx(t), "tcp", l.Addr().String(), s)
	if v := ucs.LoadedVersion(); v.Minor == 20 {
		isShareError(t, err, share.ErrRefused)
		assert.Contains(t, err.Error(), "UCX "+v.String()+" cannot carry tcp between two processes over a loopback device")
		assert.Contains(t, err.Error(), "serve on a non-loopback address")
		// Counted once the exporter's side of the refusal has ended, which
		// may come just after the importer read it.
		assert.Eventually(t, func() bool { return exp.Stats().Refused == 1 }, 10*time.Second, time.Millisecond)
		return
	}
	require.NoError(t, err)
	defer imp.Close()
	r, err := imp.Region("a")
	require.NoError(t, err)
	got := make([]byte, len(want))
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// (1) The service round trip: ReadAt/WriteAt, io.SectionReader,
// io.NewOffsetWriter, io.Copy between two regions.
func TestNewcomerServiceRoundTrip(t *testing.T) {
	s := sealer(t)
	ctx := newcomerCtx(t)
	fm, sm := memory(t, pattern(64<<10, 1)), memory(t, make([]byte, 64<<10))
	frames, scratch := fm.Bytes(), sm.Bytes()
	want := append([]byte(nil), frames...)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"frames": fm, "scratch": sm})
	defer svc.l.Close()
	defer svc.exp.Close()

	c := newNewcomerClient(t, ctx, svc.addr(), s)
	defer c.imp.Close()

	require.Len(t, c.regions, 2)
	fr, ok := c.regions["frames"]
	require.True(t, ok)
	sc := c.regions["scratch"]
	require.NotNil(t, sc)
	assert.Equal(t, len(frames), fr.Len())
	assert.Equal(t, "frames", fr.ID())
	assert.True(t, fr.Expires().After(time.Now()))
	assert.NoError(t, fr.Err())

	// The same region through Importer.Region.
	fr2, err := c.imp.Region("frames")
	require.NoError(t, err)
	assert.Equal(t, fr.Len(), fr2.Len())

	// ReadAt whole.
	p := make([]byte, fr.Len())
	n, err := fr.ReadAt(p, 0)
	require.NoError(t, err)
	require.Equal(t, len(p), n)
	require.True(t, bytes.Equal(want, p))

	// ReadAt across the end: fewer bytes, io.EOF (io.ReaderAt contract).
	p = make([]byte, 100)
	n, err = fr.ReadAt(p, int64(fr.Len()-40))
	assert.Equal(t, 40, n)
	assert.ErrorIs(t, err, io.EOF)
	assert.True(t, bytes.Equal(want[len(want)-40:], p[:40]))

	// ReadAt exactly at the end, and past it: 0, io.EOF, as bytes.Reader
	// (a negative offset is an error in both).
	ref := bytes.NewReader(want)
	for _, off := range []int64{int64(fr.Len()), int64(fr.Len()) + 1, int64(fr.Len()) + 1<<40} {
		n, err = fr.ReadAt(make([]byte, 8), off)
		wn, werr := ref.ReadAt(make([]byte, 8), off)
		assert.Equal(t, wn, n, "at %d", off)
		assert.Equal(t, werr, err, "at %d", off)
	}
	_, err = fr.ReadAt(make([]byte, 8), -1)
	assert.ErrorIs(t, err, ucs.ErrOutOfRange)

	// io.SectionReader over the region.
	sr := io.NewSectionReader(fr, 1000, 5000)
	got, err := io.ReadAll(sr)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want[1000:6000], got))

	// io.NewOffsetWriter over the other region.
	w := io.NewOffsetWriter(sc, 10)
	n, err = w.Write([]byte("hello"))
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.Equal(t, "hello", string(scratch[10:15]), "WriteAt returns once the bytes are in the host's memory")

	// io.Copy a whole region into the other.
	n64, err := io.Copy(io.NewOffsetWriter(sc, 0), io.NewSectionReader(fr, 0, int64(fr.Len())))
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), n64)
	assert.True(t, bytes.Equal(want, scratch))

	// A write that does not fit writes nothing.
	before := append([]byte(nil), scratch[len(scratch)-3:]...)
	n, err = sc.WriteAt([]byte("0123456789"), int64(sc.Len()-3))
	assert.Error(t, err)
	assert.Equal(t, 0, n)
	assert.Equal(t, before, scratch[len(scratch)-3:])

	// Negative offsets are refused, not a panic.
	_, err = fr.ReadAt(make([]byte, 1), -1)
	assert.Error(t, err)
	_, err = sc.WriteAt([]byte("x"), -1)
	assert.Error(t, err)

	// Zero-length calls are harmless.
	n, err = fr.ReadAt(nil, 0)
	assert.Equal(t, 0, n)
	assert.NoError(t, err)

	// Unknown region: ucs.ErrNoElem.
	_, err = c.imp.Region("nope")
	assert.ErrorIs(t, err, ucs.ErrNoElem)

	st := c.imp.Stats()
	assert.Equal(t, int64(2), st.Regions)
	assert.Greater(t, st.BytesRead, int64(0))
	assert.Greater(t, st.BytesWritten, int64(0))
	es := svc.exp.Stats()
	assert.Equal(t, int64(2), es.Regions)
	assert.Equal(t, int64(1), es.Importers)
	assert.Len(t, es.Sessions, 1)
	assert.Len(t, svc.exp.Sessions(), 1)
}

// (2) Closing in the order that comes to mind: defers for the importer and
// the exporter, the listener closed by the test.
func TestNewcomerCloseOrderDefers(t *testing.T) {
	s := sealer(t)
	ctx := newcomerCtx(t)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"b": memory(t, pattern(4096, 2))})
	func() {
		defer svc.l.Close()
		defer svc.exp.Close()
		c := newNewcomerClient(t, ctx, svc.addr(), s)
		defer c.imp.Close()
		_, err := c.regions["b"].ReadAt(make([]byte, 10), 0)
		require.NoError(t, err)
	}()
	select {
	case err := <-svc.served:
		// Close closed l: Serve returns nil.
		assert.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
}

// (2) The listener closed by the test before the exporter.
func TestNewcomerListenerClosedFirst(t *testing.T) {
	s := sealer(t)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"b": memory(t, pattern(4096, 3))})
	defer svc.exp.Close()
	require.NoError(t, svc.l.Close())
	select {
	case err := <-svc.served:
		// "It returns the error that ended l's Accept".
		assert.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return after the listener closed")
	}
	// Closing the listener (again) after Close must not matter either.
	assert.NoError(t, svc.exp.Close())
}

// (2) The exporter closed while an importer goroutine still reads.
func TestNewcomerExporterClosedWhileReading(t *testing.T) {
	s := sealer(t)
	ctx := newcomerCtx(t)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"b": memory(t, pattern(256<<10, 4))})
	defer svc.l.Close()
	c := newNewcomerClient(t, ctx, svc.addr(), s)
	defer c.imp.Close()
	r := c.regions["b"]

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		p := make([]byte, r.Len())
		var once sync.Once
		for {
			_, err := r.ReadAt(p, 0)
			once.Do(func() { close(started) })
			if err != nil {
				done <- err
				return
			}
		}
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- svc.exp.Close() }()
	select {
	case err := <-closed:
		assert.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("Exporter.Close hung while an importer read")
	}
	select {
	case err := <-done:
		isShareError(t, err, share.ErrRevoked)
	case <-time.After(3 * time.Second):
		t.Fatal("the reader never saw the revocation")
	}
	select {
	case <-c.imp.Revoked():
	case <-time.After(time.Second):
		t.Fatal("Importer.Revoked not closed")
	}
	assert.ErrorIs(t, c.imp.Err(), share.ErrRevoked)
	assert.ErrorIs(t, r.Err(), share.ErrRevoked)
}

// (3) A Region used after Importer.Close.
func TestNewcomerRegionAfterImporterClose(t *testing.T) {
	s := sealer(t)
	ctx := newcomerCtx(t)
	mem := memory(t, pattern(4096, 5))
	buf := mem.Bytes()
	svc := newNewcomerService(t, s, map[string]*share.Memory{"b": mem})
	defer svc.l.Close()
	defer svc.exp.Close()
	c := newNewcomerClient(t, ctx, svc.addr(), s)
	r := c.regions["b"]
	require.NoError(t, c.imp.Close())

	before := append([]byte(nil), buf...)
	p := make([]byte, 10)
	n, err := r.ReadAt(p, 0)
	assert.Equal(t, 0, n)
	require.Error(t, err)
	t.Logf("ReadAt after Importer.Close: %v (ErrRevoked=%v, ErrClosed=%v)",
		err, errors.Is(err, share.ErrRevoked), errors.Is(err, ucs.ErrClosed))
	assert.ErrorIs(t, err, share.ErrClosed, "the program closed the importer: closed, not revoked")
	var ue *ucs.Error
	assert.True(t, errors.As(err, &ue))

	n, err = r.WriteAt([]byte("xx"), 0)
	assert.Equal(t, 0, n)
	assert.Error(t, err)
	assert.Equal(t, before, buf, "a write after Close reached the exporter's memory")

	_, err = r.ReadAtContext(ctx, p, 0)
	assert.Error(t, err)
	_, err = io.Copy(io.Discard, io.NewSectionReader(r, 0, int64(r.Len())))
	assert.Error(t, err)

	// Close again: safe, and the region's accessors still answer.
	assert.NoError(t, c.imp.Close())
	assert.Equal(t, 4096, r.Len())
	assert.Equal(t, "b", r.ID())
	select {
	case <-c.imp.Revoked():
	case <-time.After(time.Second):
		t.Fatal("Revoked not closed after Importer.Close")
	}
	t.Logf("imp.Err after Close: %v; r.Err: %v", c.imp.Err(), r.Err())
}

// (4) Revoke twice, and importers may open new sessions afterwards.
func TestNewcomerRevokeTwice(t *testing.T) {
	mem := memory(t, pattern(4096, 6))
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadWrite))
	ctx := newcomerCtx(t)
	imp := dial(t, addr)
	r, err := imp.Region("b")
	require.NoError(t, err)

	require.NoError(t, errOf(exp.Revoke(ctx)))
	select {
	case <-imp.Revoked():
	case <-time.After(time.Second):
		t.Fatal("importer not revoked")
	}
	isShareError(t, imp.Err(), share.ErrRevoked)
	_, err = r.ReadAt(make([]byte, 1), 0)
	isShareError(t, err, share.ErrRevoked)

	require.NoError(t, errOf(exp.Revoke(ctx)), "a second Revoke with nobody to revoke")

	// A new session works.
	imp2 := dial(t, addr)
	r2, err := imp2.Region("b")
	require.NoError(t, err)
	_, err = r2.ReadAt(make([]byte, 16), 0)
	require.NoError(t, err)
	assert.NoError(t, imp.Close())
}

// (4) Close twice, concurrently, on both sides.
func TestNewcomerCloseTwice(t *testing.T) {
	s := sealer(t)
	ctx := newcomerCtx(t)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"b": memory(t, pattern(4096, 7))})
	defer svc.l.Close()
	c := newNewcomerClient(t, ctx, svc.addr(), s)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 3; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); errs <- c.imp.Close() }()
		go func() { defer wg.Done(); errs <- svc.exp.Close() }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.NoError(t, c.imp.Close())
	assert.NoError(t, svc.exp.Close())
}

// (4) Remove of an unknown id.
func TestNewcomerRemoveUnknown(t *testing.T) {
	// Not serve(t): see newcomerExporter.
	exp := newcomerExporter(t)
	err := errOf(exp.Remove(newcomerCtx(t), "never-added"))
	require.Error(t, err)
	t.Logf("Remove unknown: %v", err)
	assert.ErrorIs(t, err, ucs.ErrNoElem)
}

// (4) Add after Close.
func TestNewcomerAddAfterClose(t *testing.T) {
	mem := memory(t, make([]byte, 64))
	exp, err := share.NewExporter(sealer(t))
	require.NoError(t, err)
	require.NoError(t, exp.Close())
	err = exp.Add(context.Background(), "late", mem, share.ReadOnly)
	require.Error(t, err)
	isShareError(t, err, ucs.ErrClosed)
	// Other calls after Close.
	assert.Error(t, errOf(exp.Remove(context.Background(), "late")))
	err = exp.Serve(listen(t))
	t.Logf("Serve after Close: %v", err)
	assert.Error(t, err)
	_ = exp.Stats()
	assert.Empty(t, exp.Sessions())
}

// (4) Add with the same id twice.
func TestNewcomerAddSameIDTwice(t *testing.T) {
	first := memory(t, pattern(128, 8))
	second := memory(t, pattern(256, 9))
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "dup", first, share.ReadOnly))
	err := exp.Add(context.Background(), "dup", second, share.ReadOnly)
	require.Error(t, err, "the second Add of an id must be refused, not replace silently")
	t.Logf("Add same id twice: %v", err)
	var ue *ucs.Error
	assert.True(t, errors.As(err, &ue))
	// The first stays shared.
	imp := dial(t, addr)
	r, err := imp.Region("dup")
	require.NoError(t, err)
	assert.Equal(t, first.Len(), r.Len())
}

// (4) Add with odd arguments: no Memory, a closed one, empty id, no
// protection; and NewMemory of no bytes.
func TestNewcomerAddOddArguments(t *testing.T) {
	mem := memory(t, make([]byte, 16))
	closed, err := share.NewMemory(16)
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	exp := newcomerExporter(t)
	err = exp.Add(context.Background(), "empty", nil, share.ReadOnly)
	t.Logf("Add nil Memory: %v", err)
	isShareError(t, err, ucs.ErrInvalidParam)
	err = exp.Add(context.Background(), "closed", closed, share.ReadOnly)
	t.Logf("Add closed Memory: %v", err)
	isShareError(t, err, ucs.ErrInvalidParam)
	err = exp.Add(context.Background(), "", mem, share.ReadOnly)
	t.Logf("Add empty id: %v", err)
	err = exp.Add(context.Background(), "noprot", mem, 0)
	t.Logf("Add prot 0: %v", err)
	assert.Error(t, err, "prot must be ProtRemoteRead, ProtRemoteWrite or both")
	m, err := share.NewMemory(0)
	t.Logf("NewMemory(0): %v", err)
	assert.Nil(t, m)
	isShareError(t, err, ucs.ErrInvalidParam)
}

// (4) Dial to a closed exporter: an error, no hang.
func TestNewcomerDialClosedExporter(t *testing.T) {
	s := sealer(t)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"b": memory(t, pattern(64, 10))})
	addr := svc.addr()
	// Make sure Serve runs: one session opened and closed.
	c := newNewcomerClient(t, newcomerCtx(t), addr, s)
	require.NoError(t, c.imp.Close())
	require.NoError(t, svc.exp.Close())
	require.NoError(t, <-svc.served)
	start := time.Now()
	imp, err := share.Dial(newcomerCtx(t), "tcp", addr, s)
	if imp != nil {
		imp.Close()
	}
	require.Error(t, err)
	t.Logf("Dial closed exporter: %v (%v)", err, time.Since(start))
	assert.False(t, errors.Is(err, ucs.ErrTimedOut), "Dial waited instead of being refused: %v", err)
	var ue *ucs.Error
	assert.True(t, errors.As(err, &ue), "%T", err)
}

// (4) The natural `go exp.Serve(l)` followed soon by `exp.Close()`: when
// Close wins the race, Serve returns "the exporter is closed" but leaves l
// open, so a later Dial is accepted by the kernel and hangs until the
// handshake timeout instead of failing at once.
func TestNewcomerServeAfterCloseLeavesListenerOpen(t *testing.T) {
	s := sealer(t)
	mem := memory(t, make([]byte, 64))
	exp, err := share.NewExporter(s)
	require.NoError(t, err)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadOnly))
	l, err := net.Listen("tcp", hostAddr)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, exp.Close())
	err = exp.Serve(l)
	isShareError(t, err, ucs.ErrClosed)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	imp, err := share.Dial(ctx, "tcp", l.Addr().String(), s)
	if imp != nil {
		imp.Close()
	}
	t.Logf("Dial after Serve-after-Close: %v (%v)", err, time.Since(start))
	assert.Error(t, err)
	assert.False(t, errors.Is(err, ucs.ErrTimedOut), "Dial waited for its ctx: %v", err)
	// Like http.Server.Serve, Serve should have closed l (it does in the
	// non-racing case: "nil once Close closed l").
	assert.ErrorIs(t, l.Close(), net.ErrClosed, "Serve after Close left the listener open")
}

// (4) Dial with a nil sealer: an error, not a panic.
func TestNewcomerDialNilSealer(t *testing.T) {
	_, addr := serve(t)
	var imp *share.Importer
	var err error
	require.NotPanics(t, func() {
		imp, err = share.Dial(newcomerCtx(t), "tcp", addr, nil)
	})
	if imp != nil {
		imp.Close()
	}
	require.Error(t, err)
	t.Logf("Dial nil sealer: %v", err)
	var ue *ucs.Error
	assert.True(t, errors.As(err, &ue), "%T", err)
}

// (4) NewExporter with a nil sealer: an error, not a panic.
func TestNewcomerNewExporterNilSealer(t *testing.T) {
	var exp *share.Exporter
	var err error
	require.NotPanics(t, func() { exp, err = share.NewExporter(nil) })
	if exp != nil {
		exp.Close()
	}
	require.Error(t, err)
	t.Logf("NewExporter nil sealer: %v", err)
}

// (4) A 15-byte secret: ErrSeal ("a secret is unusable").
func TestNewcomerShortSecret(t *testing.T) {
	secret := []byte("fifteen bytes!!")
	require.Len(t, secret, share.MinSecret-1)
	s, err := share.NewHMACSealer(secret)
	assert.Nil(t, s)
	isShareError(t, err, share.ErrSeal)
	assert.NotContains(t, err.Error(), string(secret), "the error must never hold the secret")

	s, err = share.NewHMACSealer(append(secret, '!'))
	require.NoError(t, err)
	sealed, err := s.Seal([]byte("msg"))
	require.NoError(t, err)
	opened, err := s.Open(sealed)
	require.NoError(t, err)
	assert.Equal(t, "msg", string(opened))
}

// The HMAC sealer refusing altered bytes: the godoc says every error of the
// package is an *ucs.Error wrapping a sentinel; ErrSeal names this case.
func TestNewcomerHMACOpenAlteredError(t *testing.T) {
	s, err := share.NewHMACSealer([]byte("a secret of at least 16 bytes"))
	require.NoError(t, err)
	sealed, err := s.Seal([]byte("msg"))
	require.NoError(t, err)
	sealed[0] ^= 1
	_, err = s.Open(sealed)
	isShareError(t, err, share.ErrSeal)
	_, err = s.Open(nil)
	isShareError(t, err, share.ErrSeal)
}

// The secret is copied: changing the caller's slice changes nothing.
func TestNewcomerSecretCopied(t *testing.T) {
	secret := []byte("a secret of at least 16 bytes")
	s, err := share.NewHMACSealer(secret)
	require.NoError(t, err)
	sealed, err := s.Seal([]byte("m"))
	require.NoError(t, err)
	for i := range secret {
		secret[i] = 0
	}
	_, err = s.Open(sealed)
	assert.NoError(t, err)
}

// (5) A ctx already cancelled, passed to Dial.
func TestNewcomerCancelledDial(t *testing.T) {
	svc := newNewcomerService(t, sealer(t), map[string]*share.Memory{"b": memory(t, make([]byte, 64))})
	defer svc.l.Close()
	defer svc.exp.Close()
	addr := svc.addr()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	imp, err := share.Dial(ctx, "tcp", addr, sealer(t))
	if imp != nil {
		imp.Close()
	}
	require.Error(t, err)
	t.Logf("Dial cancelled: %v", err)
	assert.ErrorIs(t, err, context.Canceled)
}

// (5) A ctx already cancelled, passed to ReadAtContext / WriteAtContext.
func TestNewcomerCancelledReadWrite(t *testing.T) {
	mem := memory(t, pattern(64<<10, 11))
	buf := mem.Bytes()
	want := append([]byte(nil), buf...)
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("b")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := make([]byte, 4096)
	n, err := r.ReadAtContext(ctx, p, 0)
	require.Error(t, err)
	t.Logf("ReadAtContext cancelled: n=%d %v", n, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, n, "nothing should start when ctx is already over")
	assert.Equal(t, make([]byte, 4096), p, "p written after ctx was cancelled")

	n, err = r.WriteAtContext(ctx, bytes.Repeat([]byte{0xEE}, 4096), 0)
	require.Error(t, err)
	t.Logf("WriteAtContext cancelled: n=%d %v", n, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, n)
	assert.Equal(t, want, buf)

	// The session is unharmed.
	_, err = r.ReadAt(p, 0)
	assert.NoError(t, err)
	assert.NoError(t, imp.Err())
}

// (5) A ctx already cancelled, passed to Revoke: sessions closed by force,
// the error says how many; the call must not hang.
func TestNewcomerCancelledRevoke(t *testing.T) {
	mem := memory(t, pattern(4096, 12))
	buf := mem.Bytes()
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("b")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err = errOf(exp.Revoke(ctx))
	t.Logf("Revoke cancelled ctx: %v (%v)", err, time.Since(start))
	if err != nil {
		var ue *ucs.Error
		assert.True(t, errors.As(err, &ue), "%T", err)
		assert.ErrorIs(t, err, context.Canceled)
	}
	// Once Revoke returned, no importer can reach any region.
	select {
	case <-imp.Revoked():
	case <-time.After(2 * time.Second):
		t.Fatal("importer never learnt it was cut off")
	}
	before := append([]byte(nil), buf...)
	_, err = r.WriteAt([]byte("zz"), 0)
	assert.Error(t, err)
	assert.Equal(t, before, buf)
	assert.Empty(t, exp.Sessions())
}

// (5) Cancelled ctx to Remove and Session.Revoke.
func TestNewcomerCancelledRemoveAndSessionRevoke(t *testing.T) {
	ma, mb := memory(t, pattern(4096, 13)), memory(t, pattern(4096, 14))
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "a", ma, share.ReadOnly))
	require.NoError(t, exp.Add(context.Background(), "b", mb, share.ReadOnly))
	imp := dial(t, addr)
	ra, err := imp.Region("a")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = errOf(exp.Remove(ctx, "a"))
	t.Logf("Remove cancelled ctx: %v", err)
	_, err = ra.ReadAt(make([]byte, 1), 0)
	assert.Error(t, err)

	sessions := exp.Sessions()
	for _, s := range sessions {
		err := errOf(s.Revoke(ctx))
		t.Logf("Session.Revoke cancelled ctx on %v: %v", s, err)
		select {
		case <-s.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("session not done after Revoke returned")
		}
	}
	select {
	case <-imp.Revoked():
	case <-time.After(2 * time.Second):
		t.Fatal("importer not revoked")
	}
}

// (6) The same expvar name for two exporters.
func TestNewcomerExpvarNameReused(t *testing.T) {
	name := "newcomer-dup"
	mem := memory(t, make([]byte, 64))
	var e1, e2 *share.Exporter
	var err1, err2 error
	require.NotPanics(t, func() {
		e1, err1 = share.NewExporter(sealer(t), share.WithExpvarName(name))
	})
	require.NoError(t, err1)
	require.NotPanics(t, func() {
		e2, err2 = share.NewExporter(sealer(t), share.WithExpvarName(name))
	})
	t.Logf("second exporter with the same expvar name: %v", err2)
	if e2 != nil {
		defer e2.Close()
	}
	m, ok := expvar.Get("ucx").(*expvar.Map)
	require.True(t, ok, "map ucx not published")
	v := m.Get("exporter." + name)
	require.NotNil(t, v)
	// Which exporter does the entry show? e1 shares one region, e2 none.
	require.NoError(t, e1.Add(context.Background(), "r", mem, share.ReadOnly))
	var st share.ExporterStats
	require.NoError(t, json.Unmarshal([]byte(m.Get("exporter."+name).String()), &st))
	t.Logf("published entry shows %d region(s) (e1 has 1, e2 has 0)", st.Regions)

	require.NoError(t, e1.Close())
	if err2 == nil {
		// e2 still runs: its stats should still be published ("until Close").
		assert.NotNil(t, m.Get("exporter."+name), "closing the first exporter unpublished the second one's stats")
		require.NoError(t, e2.Close())
	}
	assert.Nil(t, m.Get("exporter."+name))
}

// (6) The same expvar name for two importers.
func TestNewcomerImporterExpvarNameReused(t *testing.T) {
	mem := memory(t, pattern(64, 15))
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadOnly))
	name := "newcomer-imp-dup"
	i1 := dial(t, addr, share.WithExpvarName(name))
	var i2 *share.Importer
	var err error
	require.NotPanics(t, func() {
		i2, err = share.Dial(newcomerCtx(t), "tcp", addr, sealer(t), share.WithExpvarName(name))
	})
	t.Logf("second importer with the same expvar name: %v", err)
	m := expvar.Get("ucx").(*expvar.Map)
	require.NotNil(t, m.Get("importer."+name))
	require.NoError(t, i1.Close())
	if err == nil {
		assert.NotNil(t, m.Get("importer."+name), "closing the first importer unpublished the second one's stats")
		require.NoError(t, i2.Close())
	}
	assert.Nil(t, m.Get("importer."+name))
}

// Remove while an importer goroutine reads: the reader sees ErrRevoked, the
// memory may be reused once Remove returned.
func TestNewcomerRemoveWhileReading(t *testing.T) {
	mem := memory(t, pattern(256<<10, 16))
	buf := mem.Bytes()
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("b")
	require.NoError(t, err)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		p := make([]byte, 4096)
		var once sync.Once
		for {
			_, err := r.WriteAt(p, 0)
			once.Do(func() { close(started) })
			if err != nil {
				done <- err
				return
			}
		}
	}()
	<-started
	require.NoError(t, errOf(exp.Remove(newcomerCtx(t), "b")))
	// Reuse the memory.
	for i := range buf {
		buf[i] = 0xAB
	}
	select {
	case err := <-done:
		isShareError(t, err, share.ErrRevoked)
	case <-time.After(2 * time.Second):
		t.Fatal("the writer never saw the revocation")
	}
	for i, b := range buf {
		if b != 0xAB {
			t.Fatalf("byte %d written after Remove returned", i)
		}
	}
	// The session goes on; the region is gone for it.
	assert.NoError(t, imp.Err())
	select {
	case <-r.Revoked():
	default:
		t.Error("Region.Revoked not closed after Remove")
	}
}

// Remove a region, then Add a new buffer under the same id (a service
// replacing a buffer): the open session gets a grant for it at once. The
// *Region the importer kept for the removed one was revoked: "a revocation
// fails every later call with an error wrapping ErrRevoked".
func TestNewcomerRemoveThenAddSameID(t *testing.T) {
	om, nm := memory(t, pattern(64, 17)), memory(t, bytes.Repeat([]byte{0xCC}, 16))
	nb := nm.Bytes()
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", om, share.ReadWrite))
	imp := dial(t, addr)
	old, err := imp.Region("b")
	require.NoError(t, err)
	require.NoError(t, errOf(exp.Remove(newcomerCtx(t), "b")))
	isShareError(t, old.Err(), share.ErrRevoked)

	require.NoError(t, exp.Add(context.Background(), "b", nm, share.ReadWrite))
	var r2 *share.Region
	ok := assert.Eventually(t, func() bool {
		r2, err = imp.Region("b")
		return err == nil && r2.Len() == 16 && r2.Err() == nil
	}, time.Second, 10*time.Millisecond, "the new grant never showed up as a 16-byte region")
	if r2 != nil {
		t.Logf("imp.Region(\"b\"): Len %d, Err %v, the removed *Region itself: %v", r2.Len(), r2.Err(), r2 == old)
	}

	// The old handle stays revoked.
	select {
	case <-old.Revoked():
	default:
		t.Error("the removed region's Revoked channel is open again")
	}
	assert.ErrorIs(t, old.Err(), share.ErrRevoked)
	_, err = old.WriteAt([]byte{1, 2, 3, 4}, 0)
	assert.ErrorIs(t, err, share.ErrRevoked, "WriteAt through the removed *Region")
	assert.Equal(t, bytes.Repeat([]byte{0xCC}, 16), nb, "a revoked Region wrote into the new buffer")
	p := make([]byte, 16)
	if ok {
		_, err = r2.ReadAt(p, 0)
		require.NoError(t, err)
		assert.Equal(t, nb, p)
	}
	_, err = old.ReadAt(make([]byte, old.Len()), 0)
	t.Logf("ReadAt of Len() bytes through the removed *Region: %v", err)
}

// Rotate while an importer reads: no read fails, the region is not revoked.
func TestNewcomerRotateWhileReading(t *testing.T) {
	mem := memory(t, pattern(64<<10, 18))
	buf := mem.Bytes()
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadOnly))
	imp := dial(t, addr)
	r, err := imp.Region("b")
	require.NoError(t, err)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		p := make([]byte, 8192)
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := r.ReadAt(p, 0); err != nil {
				done <- err
				return
			}
		}
	}()
	require.NoError(t, errOf(exp.Rotate(newcomerCtx(t), "b", 50*time.Millisecond)))
	close(stop)
	assert.NoError(t, <-done)
	assert.NoError(t, r.Err())
	select {
	case <-r.Revoked():
		t.Error("a rotation is not a revocation")
	default:
	}
	p := make([]byte, 64)
	_, err = r.ReadAt(p, 0)
	require.NoError(t, err)
	assert.Equal(t, buf[:64], p)
	assert.Equal(t, int64(1), exp.Stats().Rotations)
}

// Session.Revoke cuts one importer off and leaves the other alone.
func TestNewcomerSessionRevokeOne(t *testing.T) {
	mem := memory(t, pattern(4096, 19))
	exp, addr := serve(t)
	require.NoError(t, exp.Add(context.Background(), "b", mem, share.ReadOnly))
	i1 := dial(t, addr)
	i2 := dial(t, addr)
	sessions := exp.Sessions()
	require.Len(t, sessions, 2)
	require.NoError(t, errOf(sessions[0].Revoke(newcomerCtx(t))))
	<-sessions[0].Done()
	assert.NoError(t, sessions[0].Err(), "revoked and acknowledged is a clean end")
	var revoked, alive *share.Importer
	select {
	case <-i1.Revoked():
		revoked, alive = i1, i2
	case <-i2.Revoked():
		revoked, alive = i2, i1
	case <-time.After(2 * time.Second):
		t.Fatal("neither importer was revoked")
	}
	isShareError(t, revoked.Err(), share.ErrRevoked)
	r, err := alive.Region("b")
	require.NoError(t, err)
	_, err = r.ReadAt(make([]byte, 100), 0)
	assert.NoError(t, err)
	assert.Len(t, exp.Sessions(), 1)
}

// A newcomer closes the Memory first, as a defer written first would: it
// is refused while shared (ucs.ErrBusy, saying what to do), and the
// importer goes on reading it; after Remove the Close succeeds, and a
// Memory closed cannot be added. With the exporter closed instead of the
// region removed, the Close succeeds too.
func TestNewcomerMemoryCloseWhileShared(t *testing.T) {
	s := sealer(t)
	ctx := newcomerCtx(t)
	want := pattern(8192, 9)
	m, err := share.NewMemory(len(want))
	require.NoError(t, err)
	copy(m.Bytes(), want)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"m": m})
	defer svc.l.Close()
	defer svc.exp.Close()
	c := newNewcomerClient(t, ctx, svc.addr(), s)
	defer c.imp.Close()

	err = m.Close()
	isShareError(t, err, ucs.ErrBusy)
	assert.Contains(t, err.Error(), "Remove them, or Close the exporter, first")
	got := make([]byte, len(want))
	_, err = c.regions["m"].ReadAt(got, 0)
	require.NoError(t, err, "the refused Close took nothing away")
	assert.Equal(t, want, got)
	assert.Equal(t, len(want), m.Len())

	require.NoError(t, errOf(svc.exp.Remove(ctx, "m")))
	require.NoError(t, m.Close())
	assert.Nil(t, m.Bytes())
	assert.Equal(t, 0, m.Len())
	require.NoError(t, m.Close(), "closing twice")
	err = svc.exp.Add(context.Background(), "again", m, share.ReadOnly)
	require.Error(t, err, "a closed Memory is not shared")

	m2, err := share.NewMemory(4096)
	require.NoError(t, err)
	exp2, err := share.NewExporter(s)
	require.NoError(t, err)
	require.NoError(t, exp2.Add(context.Background(), "m2", m2, share.ReadOnly))
	isShareError(t, m2.Close(), ucs.ErrBusy)
	require.NoError(t, exp2.Close())
	require.NoError(t, m2.Close(), "after the exporter's Close")
}

// A newcomer reads into and writes from a Buffer the importer hands out
// (no copy in rkey mode), whole and through sub-slices at odd offsets,
// with a cancelled ctx, and closes it in any order with the importer.
func TestNewcomerBuffer(t *testing.T) {
	s := sealer(t)
	ctx := newcomerCtx(t)
	m := memory(t, pattern(1<<20+5, 4))
	want := append([]byte(nil), m.Bytes()...)
	svc := newNewcomerService(t, s, map[string]*share.Memory{"m": m})
	defer svc.l.Close()
	defer svc.exp.Close()
	c := newNewcomerClient(t, ctx, svc.addr(), s)
	r := c.regions["m"]

	buf, err := c.imp.NewBuffer(len(want))
	require.NoError(t, err)
	assert.Equal(t, len(want), buf.Len())
	n, err := r.ReadAt(buf.Bytes(), 0)
	require.NoError(t, err)
	assert.Equal(t, len(want), n)
	assert.Equal(t, want, buf.Bytes())

	part := buf.Bytes()[3:70001]
	clear(part)
	_, err = r.ReadAtContext(ctx, part, 7)
	require.NoError(t, err)
	assert.Equal(t, want[7:7+len(part)], part)

	fresh := pattern(4096, 9)
	copy(buf.Bytes()[11:], fresh)
	_, err = r.WriteAt(buf.Bytes()[11:11+len(fresh)], 100)
	require.NoError(t, err)
	assert.Equal(t, fresh, m.Bytes()[100:100+len(fresh)], "the write is in the exporter's memory when WriteAt returns")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	n, err = r.ReadAtContext(cancelled, buf.Bytes(), 0)
	isShareError(t, err, ucs.ErrCanceled)
	assert.Zero(t, n)

	// Past the end: io.EOF, as a caller's slice.
	n, err = r.ReadAt(buf.Bytes()[:16], int64(len(want)-8))
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, 8, n)

	require.NoError(t, c.imp.Close())
	_, err = c.imp.NewBuffer(8)
	isShareError(t, err, ucs.ErrClosed)
	require.NoError(t, buf.Close(), "after the importer's Close")
	assert.Nil(t, buf.Bytes())
	require.NoError(t, buf.Close(), "twice")
}

// WithRequireMode as its godoc says: ModeExport where this machine cannot
// import exported keys fails with ucs.ErrUnsupported before any byte is
// sent; a mode the exporter does not run in is refused by the exporter
// with ErrRefused, naming both modes (played with the importer's proof
// frame, since no exporter here can run in export mode).
func TestNewcomerRequireMode(t *testing.T) {
	_, addr := serve(t, share.WithMode(share.ModeRkey))
	if uct.HaveExportedMkey() != nil {
		l := listen(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := share.Dial(ctx, "tcp", l.Addr().String(), sealer(t), share.WithRequireMode(share.ModeExport))
		require.ErrorIs(t, err, ucs.ErrUnsupported)
		assert.ErrorContains(t, err, "no memory domain here can import exported keys")
	}
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := &rawSession{t: t, c: c, s: sealer(t)}
	require.True(t, r.hellos())
	r.want = 1 // export
	typ, p := r.prove()
	require.Equal(t, byte(3), typ, "a refusal")
	assert.Equal(t, byte(0), p[0], "cause: refused")
	assert.Contains(t, string(p[1:]), "the importer requires export mode; this exporter runs in rkey mode")

	imp := dial(t, addr, share.WithRequireMode(share.ModeRkey))
	assert.Equal(t, share.ModeRkey, imp.Mode())
}

// A Dial with the wrong secret, as a newcomer makes it, says what is
// wrong in words a newcomer reads: the two sides hold different secrets;
// not a word about grants, which were never sent.
func TestNewcomerWrongSecret(t *testing.T) {
	_, addr := serve(t)
	wrong, err := share.NewHMACSealer([]byte("a secret the exporter never saw"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = share.Dial(ctx, "tcp", addr, wrong)
	require.ErrorIs(t, err, share.ErrSeal)
	t.Log(err)
	assert.Contains(t, err.Error(), "the two sides hold different secrets")
	assert.NotContains(t, err.Error(), "grant")
}

// Importer.Region of a region the exporter removed is an error wrapping
// ErrRevoked, as is every call on the Region value held from before;
// Regions lists it no more.
func TestNewcomerRegionAfterRemove(t *testing.T) {
	a, b := memory(t, pattern(4096, 1)), memory(t, pattern(4096, 2))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", a, share.ReadOnly))
	require.NoError(t, e.Add(context.Background(), "b", b, share.ReadOnly))
	imp := dial(t, addr)
	held, err := imp.Region("a")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, errOf(e.Remove(ctx, "a")))
	_, err = imp.Region("a")
	require.ErrorIs(t, err, share.ErrRevoked)
	_, err = held.ReadAt(make([]byte, 8), 0)
	require.ErrorIs(t, err, share.ErrRevoked)
	var ids []string
	for _, r := range imp.Regions() {
		ids = append(ids, r.ID())
	}
	assert.Equal(t, []string{"b"}, ids)
}

// The two sides name a session the same way: the exporter's Session.ID is
// the importer's SessionID, in their Stats too; and a region's Access is
// what the exporter's Add gave.
func TestNewcomerSessionIDBothSides(t *testing.T) {
	mem := memory(t, pattern(4096, 1))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	imp := dial(t, addr)
	ss := e.Sessions()
	require.Len(t, ss, 1)
	assert.Equal(t, imp.SessionID(), ss[0].ID())
	assert.Len(t, imp.SessionID().String(), 32)
	assert.Equal(t, imp.SessionID().String(), ss[0].Stats().ID)
	assert.Equal(t, imp.SessionID().String(), imp.Stats().Session)
	other := dial(t, addr)
	assert.NotEqual(t, imp.SessionID(), other.SessionID())
	r, err := imp.Region("a")
	require.NoError(t, err)
	assert.Equal(t, share.ReadOnly, r.Access())
	assert.Equal(t, "read-only", r.Access().String())
	require.ErrorIs(t, e.Add(context.Background(), "b", memory(t, pattern(64, 1)), share.Access(4)), ucs.ErrInvalidParam)
}
