package share_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

// Raw frames of the control protocol (docs/share-protocol.md), for peers
// that do not follow it.
func rawWrite(w io.Writer, typ byte, p []byte) error {
	b := binary.LittleEndian.AppendUint32(nil, uint32(1+len(p)))
	_, err := w.Write(append(append(b, typ), p...))
	return err
}

func rawRead(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	p := make([]byte, binary.LittleEndian.Uint32(h[:])-1)
	_, err := io.ReadFull(r, p)
	return h[4], p, err
}

// wireVersion is the control protocol's version this package speaks.
const wireVersion = 3

// rawHello is an importer's hello of version proto: for this version,
// docs/share-protocol.md's layout (a fresh nonce, the address dialed);
// for another, the magic and the version, then what version 2 sent. It
// says the connection is not TLS.
func rawHello(proto uint16, dialed string) []byte {
	b := binary.LittleEndian.AppendUint16([]byte("UCXSHARE"), proto)
	if proto != wireVersion {
		v := ucs.LoadedVersion()
		return append(b, byte(v.Major), byte(v.Minor), byte(v.Patch), 0, 0)
	}
	nonce := make([]byte, 32)
	rand.Read(nonce)
	b = append(b, nonce...)
	return append(append(b, 0, byte(len(dialed))), dialed...) // flags: no TLS
}

// rawSession is an importer's side of the handshake, written from
// docs/share-protocol.md alone.
type rawSession struct {
	t          testing.TB
	c          net.Conn
	s          share.Sealer
	helloI     []byte // payloads as sent
	helloE     []byte
	t1, t2, t3 [32]byte
	exporter   [16]byte // from accepted
	session    [16]byte
	mode       byte
	port       uint16
	want       byte // the mode the proof frame requires (0 auto)
}

// lp is b with its length (u32, little-endian) ahead, after dst.
func lp(dst, b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(dst, uint32(len(b))), b...)
}

// rawHelloes sends a hello naming the address the connection dialed and
// reads the exporter's, checking its proof: it returns whether the proof
// holds under r.s.
func (r *rawSession) hellos() bool {
	t := r.t
	r.helloI = rawHello(wireVersion, r.c.RemoteAddr().String())
	require.NoError(t, rawWrite(r.c, 1, r.helloI))
	typ, p, err := rawRead(r.c)
	require.NoError(t, err)
	require.Equal(t, byte(2), typ, "the exporter's hello: %q", p)
	r.helloE = p
	require.GreaterOrEqual(t, len(p), 44, "the exporter's hello")
	require.Equal(t, "UCXSHARE", string(p[:8]))
	require.Equal(t, uint16(wireVersion), binary.LittleEndian.Uint16(p[8:]))
	n := int(binary.LittleEndian.Uint16(p[42:]))
	require.Len(t, p, 44+n, "magic, version, nonce, the proof's length and the proof: nothing else")
	r.t1 = sha256.Sum256(append(lp(lp([]byte("ucxshare/3"), r.helloI), nil), p[10:42]...))
	msg, err := r.s.Open(p[44:])
	return err == nil && bytes.Equal(msg, append([]byte("UCXPRF-E"), r.t1[:]...))
}

// prove sends the proof frame (this release, no import, mode r.want) and
// returns the exporter's answer.
func (r *rawSession) prove() (byte, []byte) {
	t := r.t
	v := ucs.LoadedVersion()
	params := []byte{byte(v.Major), byte(v.Minor), byte(v.Patch), 0, r.want}
	r.t2 = sha256.Sum256(lp(lp(r.t1[:], r.helloE), params))
	proof, err := r.s.Seal(append([]byte("UCXPRF-I"), r.t2[:]...))
	require.NoError(t, err)
	r.t3 = sha256.Sum256(lp(r.t2[:], proof))
	require.NoError(t, rawWrite(r.c, 9, append(binary.LittleEndian.AppendUint16(params, uint16(len(proof))), proof...)))
	typ, p, err := rawRead(r.c)
	require.NoError(t, err)
	return typ, p
}

// accept opens the accepted frame and reads its fields.
func (r *rawSession) accept(p []byte) {
	t := r.t
	msg, err := r.s.Open(p)
	require.NoError(t, err, "the accepted frame opens")
	require.Len(t, msg, 8+32+3+1+16+16+2)
	require.Equal(t, "UCXACCPT", string(msg[:8]))
	require.Equal(t, r.t3[:], msg[8:40], "accepted names this handshake's transcript")
	r.mode = msg[43]
	copy(r.exporter[:], msg[44:60])
	copy(r.session[:], msg[60:76])
	r.port = binary.LittleEndian.Uint16(msg[76:])
}

// rawOpen runs the handshake up to accepted on c, with sealer s.
func rawOpen(t testing.TB, c net.Conn, s share.Sealer) *rawSession {
	t.Helper()
	r := &rawSession{t: t, c: c, s: s}
	require.True(t, r.hellos(), "the exporter proves the secret")
	typ, p := r.prove()
	require.Equal(t, byte(10), typ, "accepted: %q", p)
	r.accept(p)
	return r
}

// bindClaim is the bind message's header: Seal("UCX-BIND" ‖ t3) with s.
func (r *rawSession) bindClaim(s share.Sealer) []byte {
	b, err := s.Seal(append([]byte("UCX-BIND"), r.t3[:]...))
	require.NoError(r.t, err)
	return b
}

// A peer that never proves the secret gets no grant, even for a region
// added while it waits, and learns nothing of the exporter: its hello
// holds a nonce and the exporter's proof over this handshake, no id, no
// release, no mode, no port; the session's data path starts once the
// importer's proof holds, so no accepted frame comes.
func TestNoGrantBeforeProof(t *testing.T) {
	mem := memory(t, bytes.Repeat([]byte("TOP-SECRET "), 100))
	e, addr := serve(t, share.WithMode(share.ModeRkey), share.WithHandshakeTimeout(time.Second))
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := &rawSession{t: t, c: c, s: sealer(t)}
	require.True(t, r.hellos(), "the exporter's proof holds")
	require.NoError(t, e.Add(context.Background(), "payroll", mem, share.ReadOnly))
	typ, _, err := rawRead(c)
	if err == nil {
		assert.Equal(t, byte(3), typ, "the only frame after the hello is a refusal at the deadline")
	}
	assert.Equal(t, int64(0), e.Stats().Grants)
}

// gated holds the exporter's first write of frame type gate until
// released, so that a test can act in the middle of a handshake.
type gated struct {
	net.Listener
	gate             byte
	blocked, release chan struct{}
	once, opened     sync.Once
}

// open releases the held write (once; a cleanup opens it too).
func (l *gated) open() { l.opened.Do(func() { close(l.release) }) }

type gatedConn struct {
	net.Conn
	l *gated
}

func (l *gated) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gatedConn{c, l}, nil
}

func (c *gatedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if len(p) >= 5 && p[4] == c.l.gate {
		c.l.once.Do(func() { close(c.l.blocked); <-c.l.release })
	}
	return n, err
}

func gate(t *testing.T, frame byte) (*gated, *share.Exporter) {
	raw := listen(t)
	g := &gated{Listener: raw, gate: frame, blocked: make(chan struct{}), release: make(chan struct{})}
	e, err := share.NewExporter(sealer(t))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.Serve(g) }()
	t.Cleanup(func() {
		assert.NoError(t, e.Close())
		assert.NoError(t, <-done)
	})
	t.Cleanup(g.open) // first: a failed test leaves no write held
	return g, e
}

// dialAsync dials in a goroutine; wait collects its importer.
func dialAsync(t *testing.T, addr string) *dialing {
	d := &dialing{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		d.imp, d.err = share.Dial(ctx, "tcp", addr, sealer(t))
	}()
	return d
}

type dialing struct {
	done chan struct{}
	imp  *share.Importer
	err  error
}

// atGate waits until the exporter holds its gated write, and fails the
// test with the dial's error if the dial ended first.
func (d *dialing) atGate(t *testing.T, g *gated) {
	t.Helper()
	select {
	case <-g.blocked:
	case <-d.done:
		t.Fatalf("the dial ended before the exporter wrote frame %d: %v", g.gate, d.err)
	case <-time.After(15 * time.Second):
		t.Fatalf("the exporter never wrote frame %d", g.gate)
	}
}

func (d *dialing) wait(t *testing.T) *share.Importer {
	t.Helper()
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the dial did not return")
	}
	require.NoError(t, d.err)
	return d.imp
}

// A region added while a session is in its handshake (between the proof
// and the grants) is granted once, and Close returns.
func TestAddDuringHandshakeGrantsOnce(t *testing.T) {
	mem := memory(t, make([]byte, 4096))
	g, e := gate(t, 10) // hold "accepted"
	dialed := dialAsync(t, g.Addr().String())
	dialed.atGate(t, g)
	added := make(chan error, 1)
	go func() { added <- e.Add(context.Background(), "a", mem, share.ReadOnly) }()
	time.Sleep(100 * time.Millisecond)
	g.open()
	imp := dialed.wait(t)
	require.NoError(t, <-added)
	require.Eventually(t, func() bool { return len(imp.Regions()) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(1), e.Stats().Grants, "one grant for one region and one session")
	closed := make(chan struct{})
	go func() { imp.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Importer.Close did not return")
	}
}

// A region removed while a session receives its first grants: the
// session opens, and the region is revoked in it once Remove returned.
func TestRemoveDuringHandshake(t *testing.T) {
	var mems []*share.Memory
	for range 20 {
		mems = append(mems, memory(t, make([]byte, 4096)))
	}
	g, e := gate(t, 4) // hold the first grant
	for i, mem := range mems {
		require.NoError(t, e.Add(context.Background(), "r"+strconv.Itoa(i), mem, share.ReadOnly))
	}
	dialed := dialAsync(t, g.Addr().String())
	dialed.atGate(t, g)
	removed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		removed <- errOf(e.Remove(ctx, "r1"))
	}()
	time.Sleep(100 * time.Millisecond)
	g.open()
	imp := dialed.wait(t)
	require.NoError(t, <-removed)
	defer imp.Close()
	if r, err := imp.Region("r1"); err == nil {
		_, err = r.ReadAt(make([]byte, 8), 0)
		assert.ErrorIs(t, err, share.ErrRevoked)
	}
	r, err := imp.Region("r2")
	require.NoError(t, err)
	_, err = r.ReadAt(make([]byte, 8), 0)
	assert.NoError(t, err)
}

// A grant replayed on the control connection (it authenticates and names
// this session) is refused: the importer ends the session, and nothing
// reads the region after the exporter's Remove.
func TestReplayedGrantRefused(t *testing.T) {
	mem := memory(t, bytes.Repeat([]byte("abcdefgh"), 512))
	pl := listen(t) // a relay the exporter was told of (WithDialAddresses)
	e, addr := serve(t, share.WithDialAddresses(pl.Addr().String()))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	var mu sync.Mutex
	var grant []byte
	var toImp net.Conn
	go func() {
		ci, err := pl.Accept()
		if err != nil {
			return
		}
		ce, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		mu.Lock()
		toImp = ci
		mu.Unlock()
		go func() { io.Copy(ce, ci); ce.Close() }()
		for {
			typ, p, err := rawRead(ce)
			if err != nil {
				ci.Close()
				return
			}
			mu.Lock()
			if typ == 4 && grant == nil {
				grant = p
			}
			rawWrite(ci, typ, p)
			mu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	imp, err := share.Dial(ctx, "tcp", pl.Addr().String(), sealer(t))
	require.NoError(t, err)
	defer imp.Close()
	r, err := imp.Region("a")
	require.NoError(t, err)
	mu.Lock()
	require.NoError(t, rawWrite(toImp, 4, grant))
	mu.Unlock()
	select {
	case <-imp.Revoked():
	case <-time.After(5 * time.Second):
		t.Fatal("the replay was not refused")
	}
	assert.True(t, errors.Is(imp.Err(), share.ErrRevoked))
	assert.ErrorContains(t, imp.Err(), "replayed")
	require.NoError(t, errOf(e.Remove(ctx, "a")))
	_, err = r.ReadAt(make([]byte, 8), 0)
	assert.ErrorIs(t, err, share.ErrRevoked)
}

// A hello of another protocol version (the one before, or the next) is
// refused by its version, whatever its length, with both versions named.
func TestOtherVersionRefusedByVersion(t *testing.T) {
	_, addr := serve(t)
	for _, v := range []struct {
		hello   []byte
		version string
	}{
		{rawHello(wireVersion-1, ""), "the importer speaks protocol version 2, this exporter 3"},
		{rawHello(wireVersion+1, ""), "the importer speaks protocol version 4, this exporter 3"},
		{append(rawHello(wireVersion+1, ""), 0, 0, 0), "protocol version 4"},
	} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		require.NoError(t, rawWrite(c, 1, v.hello))
		typ, p, err := rawRead(c)
		c.Close()
		require.NoError(t, err)
		require.Equal(t, byte(3), typ)
		assert.Equal(t, byte(0), p[0], "cause: refused, not a protocol violation")
		assert.Contains(t, string(p[1:]), v.version)
	}
}
