package share_test

// Tests that play the parties the handshake must hold against
// (docs/security.md, "The handshake"): a relay between an importer and
// the exporter, a party that answers as an exporter without the secret,
// a TLS-terminating relay, and a flood of connections that never
// authenticate.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"math/big"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

// relay copies bytes both ways between each connection l accepts and a
// new connection to target, recording what the importer sent; rewrite,
// if set, changes the importer's first frame (the hello) on the way.
type relay struct {
	l       net.Listener
	mu      sync.Mutex
	fromImp [][]byte // frames the importer sent: type and payload
}

func startRelay(t *testing.T, target string, rewrite func(hello []byte) []byte) *relay {
	r := &relay{l: listen(t)}
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ci, err := r.l.Accept()
			if err != nil {
				return
			}
			ce, err := net.Dial("tcp", target)
			if err != nil {
				ci.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, ci, ce)
			cmu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(ci, ce); ci.Close() }()
			go func() {
				defer wg.Done()
				defer ce.Close()
				first := true
				for {
					typ, p, err := rawRead(ci)
					if err != nil {
						return
					}
					r.mu.Lock()
					r.fromImp = append(r.fromImp, append([]byte{typ}, p...))
					r.mu.Unlock()
					if first && rewrite != nil {
						p = rewrite(p)
					}
					first = false
					if rawWrite(ce, typ, p) != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		r.l.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return r
}

func (r *relay) importerFrameTypes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ts []byte
	for _, f := range r.fromImp {
		ts = append(ts, f[0])
	}
	return ts
}

// A relay the importer dials by mistake (a wrong address, a spoofed
// name) passes the frames on to the real exporter. The importer's hello
// names the address it dialed, the relay's, which the exporter's side of
// the connection is not: the exporter refuses before it proves anything;
// no session, no grant, no data path. A relay that rewrites the address
// in the hello to the exporter's gets the exporter's proof, but over a
// hello the importer did not send: the importer finds the proof false
// and stops before its own. Either way the relay holds nothing it can
// use, and the exporter granted nothing.
func TestRelayRefused(t *testing.T) {
	mem := memory(t, pattern(4096, 3))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	plain := startRelay(t, addr, nil)
	_, err := share.Dial(ctx, "tcp", plain.l.Addr().String(), sealer(t))
	require.ErrorIs(t, err, share.ErrRefused)
	assert.ErrorContains(t, err, "not this exporter's address")
	assert.NotContains(t, plain.importerFrameTypes(), byte(9), "the importer sent no proof")

	// The hello's last field is the address dialed (u8 length, bytes).
	rewriting := startRelay(t, addr, func(hello []byte) []byte {
		n := int(hello[len(hello)-1-len(plain.l.Addr().String())])
		require.Equal(t, len(plain.l.Addr().String()), n)
		out := append(bytes.Clone(hello[:len(hello)-1-n]), byte(len(addr)))
		return append(out, addr...)
	})
	_, err = share.Dial(ctx, "tcp", rewriting.l.Addr().String(), sealer(t))
	require.ErrorIs(t, err, share.ErrSeal)
	assert.ErrorContains(t, err, "did not prove the shared secret")
	assert.NotContains(t, rewriting.importerFrameTypes(), byte(9), "the importer sent no proof")

	require.Eventually(t, func() bool { return e.Stats().Refused == 2 }, 10*time.Second, 5*time.Millisecond,
		"both sessions ended in their handshake")
	st := e.Stats()
	assert.Zero(t, st.Grants, "grants through a relay")
	assert.Zero(t, st.Importers)
}

// A party that answers as an exporter without the secret (here one that
// sends a proof sealed under another) gets no proof from the importer:
// Dial fails with ErrSeal and says why, having sent the hello only.
func TestImporterRefusesExporterWithoutSecret(t *testing.T) {
	other, err := share.NewHMACSealer([]byte("not the exporter's secret, 32 b."))
	require.NoError(t, err)
	l := listen(t)
	got := make(chan []byte, 4)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		typ, hello, err := rawRead(c)
		if err != nil || typ != 1 {
			return
		}
		got <- []byte{typ}
		// An exporter's hello whose proof is sealed under another secret
		// (over a transcript it could compute: the importer's hello, its
		// own nonce).
		var nonce [32]byte
		rand.Read(nonce[:])
		t1 := transcript1(hello, nil, nonce)
		proof, _ := other.Seal(append([]byte("UCXPRF-E"), t1[:]...))
		p := binary.LittleEndian.AppendUint16([]byte("UCXSHARE"), wireVersion)
		p = append(p, nonce[:]...)
		p = binary.LittleEndian.AppendUint16(p, uint16(len(proof)))
		rawWrite(c, 2, append(p, proof...))
		for {
			typ, p, err := rawRead(c)
			if err != nil {
				close(got)
				return
			}
			if typ == 3 && (len(p) == 0 || p[0] != 1) {
				typ = 0xff // a refusal that does not name ErrSeal
			}
			got <- []byte{typ}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = share.Dial(ctx, "tcp", l.Addr().String(), sealer(t))
	require.ErrorIs(t, err, share.ErrSeal)
	assert.ErrorContains(t, err, "the two sides hold different secrets")
	var types []byte
	for f := range got {
		types = append(types, f...)
	}
	assert.Equal(t, []byte{1, 3}, types, "what the importer sent: its hello, then a refusal instead of its proof")
}

// transcript1 is t1 of docs/share-protocol.md.
func transcript1(helloI, binding []byte, nonceE [32]byte) [32]byte {
	b := lp(lp([]byte("ucxshare/3"), helloI), binding)
	return sha256.Sum256(append(b, nonceE[:]...))
}

// selfSigned is a TLS certificate for name.
func selfSigned(t *testing.T, name string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Over TLS the proofs cover keying material exported from the TLS
// session: a session works end to end over TLS, and a relay that
// terminates TLS on both sides (an importer that does not check the
// certificate accepts the relay's) fails, although the exporter was told
// the relay's address: the two TLS sessions export different material,
// and the exporter's proof does not hold for the importer.
func TestTLSBindsTheProofs(t *testing.T) {
	mem := memory(t, pattern(4096, 5))
	relayL := listen(t)
	e, err := share.NewExporter(sealer(t), share.WithDialAddresses(relayL.Addr().String()))
	require.NoError(t, err)
	srvCfg := &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "exporter")}, MinVersion: tls.VersionTLS13}
	l := tls.NewListener(listen(t), srvCfg)
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	t.Cleanup(func() { assert.NoError(t, e.Close()); assert.NoError(t, <-served) })
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cliCfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13} // the certificate is not the point here

	raw, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	imp, err := share.NewImporter(ctx, tls.Client(raw, cliCfg), sealer(t))
	require.NoError(t, err, "a session over TLS")
	r, err := imp.Region("a")
	require.NoError(t, err)
	got := make([]byte, 4096)
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, -1, checkPattern(got, 5))
	require.NoError(t, imp.Close())

	// The relay: TLS with the importer under its own certificate, TLS
	// with the exporter, frames copied between the two.
	relayCfg := &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "exporter")}, MinVersion: tls.VersionTLS13}
	go func() {
		c, err := relayL.Accept()
		if err != nil {
			return
		}
		ci := tls.Server(c, relayCfg)
		ce, err := tls.Dial("tcp", l.Addr().String(), cliCfg)
		if err != nil {
			ci.Close()
			return
		}
		go func() { io.Copy(ce, ci); ce.Close() }()
		io.Copy(ci, ce)
		ci.Close()
	}()
	raw, err = net.Dial("tcp", relayL.Addr().String())
	require.NoError(t, err)
	_, err = share.NewImporter(ctx, tls.Client(raw, cliCfg), sealer(t))
	require.ErrorIs(t, err, share.ErrSeal, "a session through a TLS-terminating relay")
	assert.ErrorContains(t, err, "did not prove the shared secret")
	assert.Equal(t, int64(1), e.Stats().Grants, "the one grant of the direct session")
}

// A flood of connections that never authenticate, from many source
// addresses (127.0.0.2 to 127.0.0.251) and each sending a frame header
// that announces the largest payload and nothing more: the exporter holds
// at most Limits.Handshakes of them, each with one goroutine and no
// payload allocated, closes the rest as it accepts them (Throttled), and
// drops the held ones at the hello's deadline; then it answers a hello
// again. The measured figures are in docs/security.md.
func TestHandshakeFloodBounded(t *testing.T) {
	const conns = 1000
	limits := share.Limits{Handshakes: 64, HandshakesPerHost: 8, Hello: 2 * time.Second}
	e, err := share.NewExporter(sealer(t), share.WithLimits(limits))
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	t.Cleanup(func() { assert.NoError(t, e.Close()); assert.NoError(t, <-served) })

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	header := binary.LittleEndian.AppendUint32(nil, 128<<10)
	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	for i := range conns {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%250))}}
		c, err := d.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		_, err = c.Write(header)
		require.NoError(t, err)
		flood = append(flood, c)
	}
	require.Eventually(t, func() bool { return e.Stats().Served+e.Stats().Throttled == conns }, 10*time.Second, 5*time.Millisecond,
		"the exporter accepted every connection")
	st := e.Stats()
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	goroutines := runtime.NumGoroutine() - g0
	heap := int64(during.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d connections: %d held in their handshake, %d closed unanswered; +%d goroutines (the test's own included), heap %+d KiB",
		conns, st.Served, st.Throttled, goroutines, heap>>10)
	assert.LessOrEqual(t, st.Served, int64(limits.Handshakes), "connections held in their handshake")
	assert.Equal(t, int64(conns)-st.Served, st.Throttled)
	assert.LessOrEqual(t, goroutines, limits.Handshakes+8, "goroutines the flood holds")
	assert.Less(t, heap, int64(4<<20), "heap the flood holds (1000 connections of 4 KiB of buffers each would be 4 MiB)")

	// At the hello's deadline the held connections are dropped and the
	// exporter answers a hello.
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		if rawWrite(c, 1, rawHello(wireVersion, c.RemoteAddr().String())) != nil {
			return false
		}
		typ, _, err := rawRead(c)
		return err == nil && typ == 2
	}, 3*limits.Hello, 50*time.Millisecond, "a hello answered after the flood's deadline")
}

// Connections from one source address beyond HandshakesPerHost are
// closed unanswered while that source holds its share; another source is
// still answered.
func TestHandshakesPerHostBounded(t *testing.T) {
	e, err := share.NewExporter(sealer(t), share.WithLimits(share.Limits{HandshakesPerHost: 3}))
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	t.Cleanup(func() { assert.NoError(t, e.Close()); assert.NoError(t, <-served) })
	from := func(ip byte) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, ip)}}
		c, err := d.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range 10 {
		from(7)
	}
	require.Eventually(t, func() bool { return e.Stats().Served+e.Stats().Throttled == 10 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(3), e.Stats().Served)
	c := from(8)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	require.NoError(t, rawWrite(c, 1, rawHello(wireVersion, c.RemoteAddr().String())))
	typ, _, err := rawRead(c)
	require.NoError(t, err)
	assert.Equal(t, byte(2), typ, "another source is answered")
}

// An importer host that proved the secret holds at most SessionsPerHost
// sessions: the next is refused with ErrRefused saying why, and one more
// opens once a session closed (an importer that reconnects in a loop
// holds a bounded number of registrations and data paths).
func TestSessionsPerHostBounded(t *testing.T) {
	mem := memory(t, pattern(4096, 1))
	e, addr := serve(t, share.WithLimits(share.Limits{SessionsPerHost: 2}))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	a := dial(t, addr)
	dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := share.Dial(ctx, "tcp", addr, sealer(t))
	require.ErrorIs(t, err, share.ErrRefused)
	assert.ErrorContains(t, err, "2 sessions from this importer's host are open")
	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { return len(e.Sessions()) == 1 }, 10*time.Second, 5*time.Millisecond)
	dial(t, addr)
	assert.Equal(t, int64(3), e.Stats().Grants, "one grant for each of the three sessions that opened")
}

// A session over a Unix socket works in rkey mode (both data paths on
// the loopback device), as the README offers; on UCX 1.20, which cannot
// carry tcp between two processes over loopback, it is refused and says
// so.
func TestNewcomerUnixSocketRkey(t *testing.T) {
	mem := memory(t, pattern(8192, 4))
	e, err := share.NewExporter(sealer(t), share.WithMode(share.ModeRkey))
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "share.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	go e.Serve(l)
	t.Cleanup(func() { e.Close() })
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	imp, err := share.Dial(ctx, "unix", sock, sealer(t))
	if v := ucs.LoadedVersion(); v.Major == 1 && v.Minor == 20 {
		require.ErrorIs(t, err, share.ErrRefused)
		assert.ErrorContains(t, err, "loopback")
		return
	}
	require.NoError(t, err)
	defer imp.Close()
	r, err := imp.Region("a")
	require.NoError(t, err)
	got := make([]byte, 8192)
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, -1, checkPattern(got, 4), "bytes over a Unix-socket session")
}

// TLS on one side only (here a proxy that speaks plain TCP to the
// importer and TLS to the exporter, whose address the exporter was told)
// is refused by the exporter saying so, not reported as a wrong secret.
func TestTLSOnOneSideRefused(t *testing.T) {
	proxyL := listen(t)
	e, err := share.NewExporter(sealer(t), share.WithDialAddresses(proxyL.Addr().String()))
	require.NoError(t, err)
	l := tls.NewListener(listen(t), &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "exporter")}, MinVersion: tls.VersionTLS13})
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	t.Cleanup(func() { assert.NoError(t, e.Close()); assert.NoError(t, <-served) })
	go func() {
		ci, err := proxyL.Accept()
		if err != nil {
			return
		}
		ce, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			ci.Close()
			return
		}
		go func() { io.Copy(ce, ci); ce.Close() }()
		io.Copy(ci, ce)
		ci.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = share.Dial(ctx, "tcp", proxyL.Addr().String(), sealer(t))
	require.ErrorIs(t, err, share.ErrRefused)
	assert.ErrorContains(t, err, "TLS on one side of the connection only")
}

// A connection that sent a hello keeps its place among those in their
// handshake for Limits.Hello more at most: one that never sends its proof
// is cut then, not at the (longer) handshake timeout.
func TestProofDeadline(t *testing.T) {
	_, addr := serve(t, share.WithHandshakeTimeout(60*time.Second), share.WithLimits(share.Limits{Hello: 500 * time.Millisecond}))
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard, half the handshake timeout
	r := &rawSession{t: t, c: c, s: sealer(t)}
	require.True(t, r.hellos())
	_, _, err = rawRead(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the exporter still waits for the proof")
	require.Error(t, err, "the exporter ends the connection")
}

// WithDialAddresses takes what an importer can have dialed: an IP
// address and port, or a Unix socket's absolute path; a host name, a
// wildcard address or port 0 is refused at NewExporter, saying why.
func TestNewcomerDialAddresses(t *testing.T) {
	for _, a := range []string{"exporter.svc:7000", ":7000", "0.0.0.0:7000", "192.0.2.7:0", "relative.sock", ""} {
		_, err := share.NewExporter(sealer(t), share.WithDialAddresses(a))
		require.ErrorIs(t, err, ucs.ErrInvalidParam, "%q", a)
	}
	for _, a := range []string{"192.0.2.7:7000", "[2001:db8::7]:7000", "/run/share.sock"} {
		e, err := share.NewExporter(sealer(t), share.WithDialAddresses(a))
		require.NoError(t, err, "%q", a)
		require.NoError(t, e.Close())
	}
}
