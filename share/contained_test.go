package share_test

// Containment (docs/security.md): the tests play the peer one would least
// like to meet. A hostile importer holds the secret and follows the
// handshake, then sends whatever it likes on its UCX endpoint: raw gets
// and puts at any address, through read-only grants and after revocations
// it acknowledged. A peer without a session scans every port the
// exporter's processes listen on.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// hostile is an importer that holds the secret and obeys nothing after
// the handshake.
type hostile struct {
	t      testing.TB
	c      net.Conn
	uctx   *ucp.Context
	w      *ucp.Worker
	ep     *ucp.Endpoint
	stop   context.CancelFunc
	s      share.Sealer
	grants map[string]rawGrant
	keys   []*ucp.RemoteKey
	port   uint16      // the data path's, from accepted
	raw    *rawSession // the handshake
}

// rawGrant is a grant's fields as docs/share-protocol.md lays them out.
type rawGrant struct {
	region string
	gen    uint64
	prot   uint32
	addr   uint64
	length uint64
	key    []byte
	rr     ucp.RemoteRegion
}

// dialHostile opens a session by hand, with the tests' secret, and
// installs every initial grant.
func dialHostile(t testing.TB, addr string) *hostile { return dialHostileWith(t, addr, sealer(t)) }

func dialHostileWith(t testing.TB, addr string, s share.Sealer) *hostile {
	t.Helper()
	h := proveHostile(t, addr, s)
	h.bind(addr)
	return h
}

// proveHostile follows the handshake up to the exporter's accepted frame:
// the session's data path runs, its port is h.port, nothing is bound.
func proveHostile(t testing.TB, addr string, s share.Sealer) *hostile {
	t.Helper()
	return proveHostileVia(t, &net.Dialer{}, addr, s)
}

// proveHostileVia is proveHostile connecting through d.
func proveHostileVia(t testing.TB, d *net.Dialer, addr string, s share.Sealer) *hostile {
	t.Helper()
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	h := &hostile{t: t, c: c, s: s, grants: map[string]rawGrant{}}
	t.Cleanup(h.close)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	h.raw = rawOpen(t, c, s)
	require.Equal(t, byte(2), h.raw.mode, "rkey mode")
	h.port = h.raw.port
	return h
}

// bindHeader is the bind message's header: the claim sealed with s
// (docs/share-protocol.md).
func (h *hostile) bindHeader(s share.Sealer) []byte { return h.raw.bindClaim(s) }

// bind connects UCX to the data path, sends the bind claim, and
// installs the grants up to ready.
func (h *hostile) bind(addr string) {
	t := h.t
	t.Helper()
	// This test process may hold other sockets with the data path (an
	// intruder's, played in the same process): the data ports are those
	// of this endpoint's worker only, as an importer's data path, a
	// process of its own, reports them. Its connections are the ones new
	// from here, told by both ends: a new connection may share its local
	// port with an older one to another peer (Linux reuses an ephemeral
	// port for a different destination), and a report that left it out
	// had the data path cut it (once in a CI stress run).
	dp := dataPathListeningOn(t, h.port)
	before := map[string]bool{}
	for _, s := range tcpSockets(t, os.Getpid()) {
		f := strings.Fields(s)
		before[f[0]+" "+f[1]] = true
	}
	var err error
	h.openUCX()
	host, _, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h.ep, err = h.w.Connect(ctx, net.JoinHostPort(host, strconv.Itoa(int(h.port))))
	require.NoError(t, err)
	req, err := h.ep.SendAM(0x5e01, h.bindHeader(h.s), nil, ucp.AMReply)
	require.NoError(t, err)
	require.NoError(t, req.Wait(ctx))
	require.NoError(t, h.ep.Flush(ctx))
	// The data ports: this process's tcp ports of its connections with
	// the data path (docs/share-protocol.md).
	theirs := map[string]bool{}
	for _, s := range tcpSockets(t, dp) {
		_, port, _ := strings.Cut(strings.Fields(s)[0], ":")
		theirs[port] = true
	}
	var ports []byte
	n := 0
	for _, s := range tcpSockets(t, os.Getpid()) {
		f := strings.Fields(s)
		_, local, _ := strings.Cut(f[0], ":")
		_, remote, _ := strings.Cut(f[1], ":")
		if f[2] == "01" && theirs[remote] && !before[f[0]+" "+f[1]] {
			p, _ := strconv.ParseUint(local, 16, 16)
			ports = binary.LittleEndian.AppendUint16(ports, uint16(p))
			n++
		}
	}
	require.NoError(t, rawWrite(h.c, 11, append([]byte{byte(n)}, ports...)))
	for {
		typ, p, err := rawRead(h.c)
		require.NoError(t, err)
		if typ == 5 { // ready
			break
		}
		require.Equal(t, byte(4), typ, "a %d frame in the handshake: %q", typ, p)
		h.install(p)
	}
	h.c.SetDeadline(time.Time{})
}

// install opens a sealed grant and unpacks its key on the endpoint.
func (h *hostile) install(sealed []byte) rawGrant {
	t := h.t
	b, err := h.s.Open(sealed)
	require.NoError(t, err)
	le := binary.LittleEndian
	off := 8 + 2 + 3 + 1 + 16 + 16 // magic, format, UCX, mode, exporter, session
	g := rawGrant{gen: le.Uint64(b[off:]), prot: le.Uint32(b[off+8:]), addr: le.Uint64(b[off+12:]), length: le.Uint64(b[off+20:])}
	off += 8 + 4 + 8 + 8 + 8 + 8
	n := int(b[off])
	g.region = string(b[off+1 : off+1+n])
	off += 1 + n
	g.key = b[off+4 : off+4+int(le.Uint32(b[off:]))]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.rr, err = h.ep.UnpackRegion(ctx, g.key)
	require.NoError(t, err)
	h.grants[g.region] = g
	return g
}

// anyKey is a key with no bounds: a bare UCX key of the peer's own memory.
// UCX's software RMA serves any address with it, as a peer written in C
// would.
func (h *hostile) anyKey() *ucp.RemoteKey {
	t := h.t
	own, err := h.uctx.Allocate(4096)
	require.NoError(t, err)
	t.Cleanup(func() { own.Close() })
	bare, err := own.PackRemoteKey()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rk, err := h.ep.UnpackRemoteKey(ctx, bare)
	require.NoError(t, err)
	h.keys = append(h.keys, rk)
	return rk
}

// get reads n bytes at any address of the exporter's data path, with a
// key it holds: UCX's software RMA checks neither.
func (h *hostile) get(raddr uint64, n int, key *ucp.RemoteKey) ([]byte, error) {
	b := make([]byte, n)
	r, err := key.Region(raddr, n) // an unbounded key: any address
	if err != nil {
		return nil, err
	}
	req, err := r.Get(b, 0)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return b, req.Wait(ctx)
}

func (h *hostile) put(b []byte, raddr uint64, key *ucp.RemoteKey) error {
	r, err := key.Region(raddr, len(b))
	if err != nil {
		return err
	}
	req, err := r.Put(b, 0)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := req.Wait(ctx); err != nil {
		return err
	}
	return h.ep.Flush(ctx)
}

// next reads the next control frame, answering nothing.
func (h *hostile) next(timeout time.Duration) (byte, []byte, error) {
	h.c.SetReadDeadline(time.Now().Add(timeout))
	return rawRead(h.c)
}

// ack acknowledges a revocation (the ack frame), whatever it goes on to do.
func (h *hostile) ack(revoke []byte) {
	gen := binary.LittleEndian.Uint64(revoke)
	region := revoke[10 : 10+int(revoke[9])]
	p := binary.LittleEndian.AppendUint64(nil, gen)
	p = append(append(p, byte(len(region))), region...)
	require.NoError(h.t, rawWrite(h.c, 7, p))
}

func (h *hostile) close() {
	if h.ep != nil {
		for _, g := range h.grants {
			g.rr.Key().Close()
		}
		for _, k := range h.keys {
			k.Close()
		}
		h.ep.Close(context.Background(), ucp.CloseForce)
	}
	if h.w != nil {
		h.stop()
		h.w.Close()
	}
	if h.uctx != nil {
		h.uctx.Close()
	}
	if h.c != nil {
		h.c.Close()
	}
}

// openUCX makes the peer's UCX: a context (RMA and active messages, then
// opts), a worker, a goroutine progressing it.
func (h *hostile) openUCX(opts ...ucp.ContextOption) {
	t := h.t
	t.Helper()
	var err error
	h.uctx, err = ucp.NewContext(append([]ucp.ContextOption{ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureAM)}, opts...)...)
	require.NoError(t, err)
	h.w, err = h.uctx.NewWorker()
	require.NoError(t, err)
	run, stop := context.WithCancel(context.Background())
	h.stop = stop
	go h.w.Run(run)
}

// connectUCX is a UCX peer without a session: its own context and worker,
// an endpoint to addr (a data path's listener).
func connectUCX(t testing.TB, addr string) *hostile {
	t.Helper()
	h := &hostile{t: t, grants: map[string]rawGrant{}}
	t.Cleanup(h.close)
	var err error
	h.openUCX()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.ep, err = h.w.Connect(ctx, addr)
	require.NoError(t, err)
	return h
}

// newMemory is shared memory filled with fill, closed after the test's
// later cleanups (its exporter's among them).
func newMemory(t testing.TB, fill []byte) *share.Memory {
	t.Helper()
	m, err := share.NewMemory(len(fill))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	copy(m.Bytes(), fill)
	return m
}

// stillServes: the exporter serves a well-behaved importer after whatever
// came before.
func stillServes(t *testing.T, addr, region string, want []byte) {
	t.Helper()
	imp := dial(t, addr)
	r, err := imp.Region(region)
	require.NoError(t, err)
	got := make([]byte, len(want))
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, imp.Close())
}

// An importer that writes through a read-only grant reaches nothing: the
// data path maps the region read-only, from a read-only file, so the
// write faults there and ends that session; the exporter's bytes are
// unchanged and the exporter serves the next importer.
func TestContainedReadOnlyGrant(t *testing.T) {
	for round := range testproc.Rounds(2) {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			want := bytes.Repeat([]byte("read-only "), 500)
			mem := newMemory(t, want)
			rw := newMemory(t, make([]byte, 64))
			e, addr := serve(t, share.WithMode(share.ModeRkey))
			require.NoError(t, e.Add(context.Background(), "ro", mem, share.ReadOnly))
			require.NoError(t, e.Add(context.Background(), "rw", rw, share.ReadWrite))
			h := dialHostile(t, addr)
			// The control: the same put through a writable grant lands.
			grw := h.grants["rw"]
			require.NoError(t, h.put([]byte("WRITTEN"), grw.addr, grw.rr.Key()))
			require.Equal(t, []byte("WRITTEN"), rw.Bytes()[:7])
			g := h.grants["ro"]
			require.Equal(t, uint32(ucp.ProtRemoteRead), g.prot&uint32(ucp.ProtRemoteRead|ucp.ProtRemoteWrite))
			got, err := h.get(g.addr, 16, g.rr.Key())
			require.NoError(t, err)
			require.Equal(t, want[:16], got)

			err = h.put([]byte("OVERWRITTEN"), g.addr, g.rr.Key())
			require.Error(t, err, "a put through a read-only grant completed")
			t.Logf("the put: %v", err)
			require.Equal(t, want, mem.Bytes(), "the exporter's bytes changed")
			sessionEnds(t, e)
			stillServes(t, addr, "ro", want)
		})
	}
}

// sessionEnds waits until the exporter has no session left.
func sessionEnds(t *testing.T, e *share.Exporter) {
	t.Helper()
	require.Eventually(t, func() bool { return len(e.Sessions()) == 0 }, 10*time.Second, 10*time.Millisecond,
		"the hostile importer's session did not end")
}

// An importer that acknowledges a revocation and goes on reaches none of
// the revoked memory once Remove returned: the data path unmapped it (the
// range is left inaccessible), so the next get faults there and ends that
// session, and bytes the exporter wrote after Remove never leave it.
func TestContainedRemoveEnforced(t *testing.T) {
	for round := range testproc.Rounds(2) {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			mem := newMemory(t, bytes.Repeat([]byte("before "), 1000))
			keep := newMemory(t, []byte("another region, still shared"))
			e, addr := serve(t, share.WithMode(share.ModeRkey))
			require.NoError(t, e.Add(context.Background(), "r", mem, share.ReadWrite))
			require.NoError(t, e.Add(context.Background(), "keep", keep, share.ReadOnly))
			h := dialHostile(t, addr)
			g := h.grants["r"]

			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				done <- errOf(e.Remove(ctx, "r"))
			}()
			typ, p, err := h.next(5 * time.Second)
			require.NoError(t, err)
			require.Equal(t, byte(6), typ, "expected a revoke: %q", p)
			h.ack(p) // and carries on
			require.NoError(t, <-done)

			secret := bytes.Repeat([]byte("AFTER-REMOVE "), 100)
			copy(mem.Bytes(), secret) // the memory is reused
			got, err := h.get(g.addr, len(secret), g.rr.Key())
			t.Logf("a get after Remove: %v", err)
			if err == nil {
				require.NotEqual(t, secret, got)
				require.False(t, bytes.Contains(got, []byte("AFTER-REMOVE")), "read reused memory after Remove")
			}
			err = h.put([]byte("written after remove"), g.addr, g.rr.Key())
			require.False(t, bytes.HasPrefix(mem.Bytes(), []byte("written after remove")), "wrote memory after Remove (put: %v)", err)
			stillServes(t, addr, "keep", []byte("another region, still shared"))
		})
	}
}

// An importer that takes a rotation's new grant, acknowledges the old
// one's revocation and goes on with the old address reaches nothing of it
// once Rotate returned: the data path unmapped the old generation, so a
// get there faults and ends the session, and bytes the exporter wrote after
// Rotate leave only through the new grant.
func TestContainedRotateEnforced(t *testing.T) {
	for round := range testproc.Rounds(2) {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			mem := newMemory(t, bytes.Repeat([]byte("before "), 1000))
			e, addr := serve(t, share.WithMode(share.ModeRkey))
			require.NoError(t, e.Add(context.Background(), "r", mem, share.ReadWrite))
			h := dialHostile(t, addr)
			old := h.grants["r"]

			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				done <- errOf(e.Rotate(ctx, "r", 100*time.Millisecond))
			}()
			typ, p, err := h.next(5 * time.Second)
			require.NoError(t, err)
			require.Equal(t, byte(4), typ, "expected the new grant: %q", p)
			fresh := h.install(p)
			require.NotEqual(t, old.gen, fresh.gen)
			typ, p, err = h.next(5 * time.Second)
			require.NoError(t, err)
			require.Equal(t, byte(6), typ, "expected the old generation's revoke: %q", p)
			h.ack(p) // and carries on with the old address
			require.NoError(t, <-done)

			marker := bytes.Repeat([]byte("AFTER-ROTATE "), 100)
			copy(mem.Bytes(), marker)
			got, err := h.get(fresh.addr, len(marker), fresh.rr.Key())
			require.NoError(t, err, "the new grant reads")
			require.Equal(t, marker, got)
			got, err = h.get(old.addr, len(marker), old.rr.Key())
			t.Logf("a get at the old generation after Rotate: %v", err)
			if err == nil {
				require.False(t, bytes.Contains(got, []byte("AFTER-ROTATE")), "read through the old generation after Rotate")
			}
			sessionEnds(t, e)
		})
	}
}

// An importer that never acknowledges the expiry of its lease keeps
// nothing: the exporter ends its session at the ack timeout and its data
// path with it.
func TestContainedLeaseEnforced(t *testing.T) {
	mem := newMemory(t, bytes.Repeat([]byte("leased "), 100))
	e, addr := serve(t, share.WithMode(share.ModeRkey), share.WithLease(300*time.Millisecond), share.WithAckTimeout(300*time.Millisecond))
	require.NoError(t, e.Add(context.Background(), "r", mem, share.ReadWrite))
	h := dialHostile(t, addr)
	g := h.grants["r"]
	typ, p, err := h.next(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, byte(6), typ, "expected a revoke at the lease's end: %q", p)
	sessionEnds(t, e)
	copy(mem.Bytes(), "AFTER-EXPIRY")
	got, err := h.get(g.addr, 12, g.rr.Key())
	require.Error(t, err, "a get after the session ended returned %q", got)
}

// A host other than the importer's reaches nothing of a session's data
// path over tcp: every port it listens on (its listener and UCX's own tcp
// interfaces) drops that host's segments, so a connection never completes
// and no byte of it (a frame header, a 17-byte wire-up) reaches UCX. Once
// the importer has bound, no one connects any more, from its host either,
// and its session goes on. The other host is played from this machine's
// 127.0.0.1, the importer's host is its network address.
func TestContainedDataPathAdmitsOnlyThePeer(t *testing.T) {
	host := testproc.HostIP()
	if host == "127.0.0.1" {
		t.Skip("needs a non-loopback address to tell the importer's host from another; this machine has only 127.0.0.1")
	}
	want := pattern(4096, 5)
	mem := newMemory(t, want)
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	h := proveHostile(t, addr, sealer(t))
	dp := dataPathListeningOn(t, h.port)
	ports := listeningPorts(t, dp)
	require.GreaterOrEqual(t, len(ports), 2, "the data path's listener and UCX's tcp interface: %v", ports)
	for _, p := range ports {
		assert.False(t, connects("127.0.0.1", net.JoinHostPort(host, p)), "port %s: another host connected", p)
		assert.True(t, connects(host, net.JoinHostPort(host, p)), "port %s: the importer's host, before its bind (the control)", p)
	}
	h.bind(addr)
	g := h.grants["a"]
	got, err := h.get(g.addr, len(want), g.rr.Key())
	require.NoError(t, err)
	require.Equal(t, want, got)
	for _, p := range listeningPorts(t, dp) {
		assert.False(t, connects(host, net.JoinHostPort(host, p)), "port %s: connected after the bind", p)
	}
	got, err = h.get(g.addr, len(want), g.rr.Key())
	require.NoError(t, err, "the bound importer goes on")
	require.Equal(t, want, got)
}

// A service whose process holds sockets of its own made without
// close-on-exec (as UCX makes its sockets, for a worker of the service's
// beside the exporter) gives none of them to a session's data path: the
// data path holds no descriptor of the service's, and the service's
// listener still accepts once a session is bound (the data path's filter
// never reached it).
func TestContainedDataPathInheritsNoDescriptor(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0) // no SOCK_CLOEXEC
	require.NoError(t, err)
	defer syscall.Close(fd)
	ip := netip.MustParseAddr(testproc.HostIP()).As4()
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: ip}))
	require.NoError(t, syscall.Listen(fd, 8))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	own := net.JoinHostPort(testproc.HostIP(), strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	require.NoError(t, err)

	mem := newMemory(t, pattern(4096, 6))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	h := dialHostile(t, addr)
	dp := dataPathListeningOn(t, h.port)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", dp))
	require.NoError(t, err)
	for _, ent := range ents {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", dp, ent.Name()))
		if err == nil {
			assert.NotEqual(t, link, l, "the data path holds the service's socket as fd %s", ent.Name())
		}
	}
	assert.True(t, connects(testproc.HostIP(), own), "the service's own listener accepts after the bind")
}

// An importer in rkey mode runs no UCX in its process: while it streams
// reads, the process holds one TCP socket, its control connection, so no
// UCX peer (the exporter's data path included) has a connection to it; its
// session's data path is its one child, which no one connects to once
// bound, and whose memory (read through /proc as its user could) holds
// the bytes moved, never the sealing secret, which the importer's own
// memory holds (the control of the scan).
func TestContainedImporterProcess(t *testing.T) {
	raw := make([]byte, 16)
	rand.Read(raw)
	key := []byte(hex.EncodeToString(raw)) // made now: in no binary's image
	s, err := share.NewHMACSealer(key)
	require.NoError(t, err)
	e, err := share.NewExporter(s, share.WithMode(share.ModeRkey))
	require.NoError(t, err)
	require.NoError(t, e.Add(context.Background(), "r", newMemory(t, pattern(64<<10, 1)), share.ReadOnly))
	l, err := net.Listen("tcp", hostAddr)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	t.Cleanup(func() {
		assert.NoError(t, e.Close())
		<-served
	})
	p := startImporter(t, nil, "-connect", l.Addr().String(), "-secret", string(key), "-read", "r:1", "-chunk", "16384")
	p.WaitLine(t, "STREAMING", bound)
	pid := p.Pid()

	socks := tcpSockets(t, pid)
	require.Len(t, socks, 1, "the importer's process holds TCP sockets beside its control connection: %v", socks)
	kids := childrenOf(t, pid)
	require.Len(t, kids, 1, "one data-path process per session")
	dp := kids[0]
	ports := listeningPorts(t, dp)
	require.NotEmpty(t, ports, "the data path's UCX listens (its tcp interface)")
	for _, port := range ports {
		assert.False(t, connects(testproc.HostIP(), net.JoinHostPort(testproc.HostIP(), port)), "port %s of the importer's data path accepted a connection after its bind", port)
	}
	assert.True(t, memoryHolds(t, pid, key), "the scan does not find the secret in the importer's own memory (its control)")
	assert.False(t, memoryHolds(t, dp, key), "the importer's data path holds the sealing secret")
	assert.NotContains(t, p.Output(), "WRONG")
}

// The importer's data path dies (SIGKILL) while the importer streams
// reads: the importer's process lives on, its session ends with a reason
// that says so, and it closes cleanly; the exporter ends that session and
// serves the next importer.
func TestContainedImporterDataPathKilled(t *testing.T) {
	want := pattern(64<<10, 1)
	mem := newMemory(t, want)
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "r", mem, share.ReadOnly))
	p := startImporter(t, nil, "-connect", addr, "-read", "r:1", "-chunk", "16384")
	p.WaitLine(t, "STREAMING", bound)
	kids := childrenOf(t, p.Pid())
	require.Len(t, kids, 1, "one data-path process per session")
	require.NoError(t, syscall.Kill(kids[0], syscall.SIGKILL))
	sessionEnds(t, e)
	require.True(t, processAlive(p.Pid()), "the importer's process died with its data path")
	assert.Contains(t, ask(t, p, "count", "COUNT"), "fails=", "the importer answers")
	p.CloseStdin()
	assert.Equal(t, "err=<nil>", strings.Fields(p.WaitLine(t, "CLOSED", bound))[1])
	assert.Equal(t, 0, p.Wait(t, bound), "the importer's exit code")
	assert.NotContains(t, p.Output(), "WRONG")
	stillServes(t, addr, "r", want)
}

// tcpSockets is the TCP sockets (any state) process pid holds, as
// "local remote state" lines.
func tcpSockets(t testing.TB, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) >= 10 && inodes[fs[9]] {
				out = append(out, fs[1]+" "+fs[2]+" "+fs[3])
			}
		}
	}
	return out
}

// memoryHolds says whether any readable mapping of process pid (up to
// 1 GiB each: the race detector's shadow and reserved address space are
// left out) holds needle, read through /proc/PID/mem.
func memoryHolds(t *testing.T, pid int, needle []byte) bool {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	buf := make([]byte, 1<<20+len(needle))
	for _, line := range strings.Split(string(maps), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 2 || fs[1][0] != 'r' {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end-start > 1<<30 {
			continue
		}
		for a := start; a < end; a += 1 << 20 {
			n := min(uint64(len(buf)), end-a)
			got, _ := mem.ReadAt(buf[:n], int64(a))
			if bytes.Contains(buf[:got], needle) {
				return true
			}
		}
	}
	return false
}

// The window of another session's bind: between the exporter's accepted
// and the importer's bind, a process on the importer's host (which the
// data path's filter admits) connects to the data path and claims the
// connection with what it could know or read there: another session's
// claim (replayed: it seals that handshake's transcript), the session's id,
// a header sealed under another secret, garbage. The data
// path holds nothing to judge a claim by and asks the exporter, which
// opens the sealed claim: each is refused and its endpoint closed; the
// importer's own claim binds; the grants, mapped only after the bind, are
// out of the intruder's reach, whose endpoint is gone.
func TestContainedBindWindow(t *testing.T) {
	want := pattern(4096, 7)
	mem := newMemory(t, want)
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	earlier := proveHostile(t, addr, sealer(t)) // a session whose claim a relay replays
	h := proveHostile(t, addr, sealer(t))       // the importer, before its bind
	host, _, _ := net.SplitHostPort(addr)
	data := net.JoinHostPort(host, strconv.Itoa(int(h.port)))
	other, err := share.NewHMACSealer([]byte("another secret, of 32 bytes ...."))
	require.NoError(t, err)
	for name, header := range map[string][]byte{
		"another session's claim":      earlier.bindHeader(sealer(t)),
		"the session's id":             h.raw.session[:],
		"a claim under another secret": h.bindHeader(other),
		"garbage":                      bytes.Repeat([]byte{0xa5}, 64),
	} {
		x := connectUCX(t, data)
		req, err := x.ep.SendAM(0x5e01, header, nil, ucp.AMReply)
		require.NoError(t, err, name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, req.Wait(ctx), name)
		cancel()
		select {
		case <-x.ep.Failed():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the intruder's endpoint stayed open", name)
		}
	}
	h.bind(addr) // the importer's claim
	g := h.grants["a"]
	got, err := h.get(g.addr, len(want), g.rr.Key())
	require.NoError(t, err)
	require.Equal(t, want, got)
	stillServes(t, addr, "a", want)
}

// The window of another session's bind, through UCX's own tcp interface:
// a process on the importer's host crafts a worker address that names
// the data path's tcp interface (its port read from /proc, as any process
// can) and connects while the importer has not bound. By the time the
// first grant is mapped its endpoint has failed and it reads nothing:
// UCX 1.18.1 ended that endpoint by itself before the bind (measured),
// and the importer's data ports have the data path cut any connection
// with the importer's host that is not its data path's (TestCutExcept).
// The importer reads on.
func TestContainedBindWindowCraftedAddress(t *testing.T) {
	want := pattern(4096, 8)
	mem := newMemory(t, want)
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	h := proveHostile(t, addr, sealer(t))
	dp := dataPathListeningOn(t, h.port)
	var iface uint16
	for _, p := range listeningPorts(t, dp) {
		if p != strconv.Itoa(int(h.port)) {
			n, _ := strconv.Atoi(p)
			iface = uint16(n)
		}
	}
	require.NotZero(t, iface, "the data path's tcp interface")

	x := &hostile{t: t, grants: map[string]rawGrant{}}
	t.Cleanup(x.close)
	var err error
	x.openUCX(ucp.WithConfig("TLS", "tcp"), ucp.WithConfig("NET_DEVICES", share.DevicesFacing(netip.MustParseAddr(testproc.HostIP()))))
	own, err := x.w.PackAddress()
	require.NoError(t, err)
	raw := bytes.Clone(own.UCX())
	info, err := wire.WalkWorkerAddress(raw)
	require.NoError(t, err)
	crafted := 0
	for _, ifc := range info.Interfaces {
		if ifc.TransportCsum == wire.TransportCsum("tcp") && len(ifc.IfaceAddr) == 2 {
			binary.BigEndian.PutUint16(ifc.IfaceAddr, iface) // the walk's slices are of raw
			crafted++
		}
	}
	require.Equal(t, 1, crafted, "one tcp interface in the intruder's address")
	x.ep, err = x.w.ConnectWorker(ucp.WorkerAddressFromUCX(raw))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Logf("the intruder's flush before the bind: %v", x.ep.Flush(ctx))

	h.bind(addr)
	select {
	case <-x.ep.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the intruder's connection outlived the bind")
	}
	g := h.grants["a"]
	_, err = x.get(g.addr, len(want), x.anyKeyOrNil())
	require.Error(t, err, "the intruder read a grant")
	got, err := h.get(g.addr, len(want), g.rr.Key())
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// anyKeyOrNil is anyKey, or nil once the endpoint failed (a get then
// fails without one).
func (h *hostile) anyKeyOrNil() *ucp.RemoteKey {
	own, err := h.uctx.Allocate(4096)
	if err != nil {
		return nil
	}
	h.t.Cleanup(func() { own.Close() })
	bare, err := own.PackRemoteKey()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rk, err := h.ep.UnpackRemoteKey(ctx, bare)
	if err != nil {
		return nil
	}
	h.keys = append(h.keys, rk)
	return rk
}

// connects says whether a TCP connection from address from to addr
// completes within half a second.
func connects(from, addr string) bool {
	d := net.Dialer{Timeout: 500 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// dataPathListeningOn is the pid of this process's child (or grandchild)
// that listens on port (a session's data path).
func dataPathListeningOn(t testing.TB, port uint16) int {
	t.Helper()
	kids := childrenOf(t, os.Getpid())
	for _, k := range kids { // an exporter run as a process of its own: its children
		kids = append(kids, childrenOf(t, k)...)
	}
	for _, kid := range kids {
		if ls, err := listeningPortsOf(kid); err == nil && slices.Contains(ls, strconv.Itoa(int(port))) {
			return kid
		}
	}
	t.Fatalf("no child process listens on port %d", port)
	return 0
}

// A peer without the secret, and a peer with it, scan every TCP port the
// exporter's own process listens on: there is one, the control listener.
// No UCX worker runs in the exporter's process in rkey mode, so no UCX
// peer reaches a byte of it; the data paths are processes of their own.
func TestContainedExporterProcessListensOnControlOnly(t *testing.T) {
	// The secret and the service's private memory are made at run time,
	// as a service reads them, so that the binary's image holds neither.
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	p := testproc.Start(t, testproc.Spec{Role: roleContainedExporter, Args: []string{keyFile}})
	private, err := hex.DecodeString(strings.TrimPrefix(p.WaitLine(t, "private ", 20*time.Second), "private "))
	require.NoError(t, err)
	granted, err := hex.DecodeString(strings.TrimPrefix(p.WaitLine(t, "granted ", 20*time.Second), "granted "))
	require.NoError(t, err)
	addr := strings.TrimPrefix(p.WaitLine(t, "addr ", 20*time.Second), "addr ")
	s, err := share.NewHMACSealer(key)
	require.NoError(t, err)
	_, ctlPort, _ := net.SplitHostPort(addr)
	h := dialHostileWith(t, addr, s) // a session: its data path is running
	g := h.grants["data"]
	pid := p.Pid()
	ports := listeningPorts(t, pid)
	require.Equal(t, []string{ctlPort}, ports, "the exporter's process listens on more than its control port")
	kids := childrenOf(t, pid)
	require.Len(t, kids, 1, "one data-path process per session")
	require.NotEmpty(t, listeningPorts(t, kids[0]), "the data path's UCX listens (tcp interfaces)")

	// What the session's peer can read of its data path is that process:
	// every readable mapping of it (from its /proc maps), read through
	// UCX as the peer would, holds neither the exporter's secret nor its
	// service memory.
	got, err := h.get(g.addr, len(granted), g.rr.Key())
	require.NoError(t, err)
	require.Equal(t, granted, got)
	found, read := scanMaps(t, h, h.anyKey(), kids[0], [][]byte{key, private, granted})
	t.Logf("read %d KiB of the data path's memory through UCX: found %q", read>>10, found)
	require.Greater(t, read, 1<<20, "the scan read too little to mean anything")
	require.Len(t, found, 1, "the scan sees the granted bytes (its control), and nothing of the exporter's secret or service memory")
	require.Contains(t, found[0], fmt.Sprintf("%q", granted))
	require.True(t, processAlive(pid), "the exporter died")
}

// scanMaps reads the readable mappings of process pid through the
// hostile peer's endpoint, in 64 KiB steps, and says which needles it saw:
// shared files first (the granted regions), then the others smallest
// first, up to 256 MiB in all, until a read fails; mappings of more than 1 GiB (the race
// detector's shadow, reserved address space) are left out.
func scanMaps(t *testing.T, h *hostile, key *ucp.RemoteKey, pid int, needles [][]byte) ([]string, int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	type span struct {
		start, end uint64
		line       string
	}
	var spans []span
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 5 || fs[1][0] != 'r' || (len(fs) > 5 && strings.HasPrefix(fs[5], "[v")) {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		if end-start <= 1<<30 {
			spans = append(spans, span{start, end, line})
		}
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		am, bm := strings.Contains(a.line, "memfd:"), strings.Contains(b.line, "memfd:")
		if am != bm {
			if am {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.end-a.start, b.end-b.start)
	})
	var found []string
	read := 0
	for _, sp := range spans {
		for a := sp.start; a < sp.end && read < 256<<20; a += 64 << 10 {
			n := min(64<<10, int(sp.end-a))
			got, err := h.get(a, n, key)
			if err != nil {
				// The mapping changed since the maps were read (a thread's
				// stack freed, say) and the read faulted: the data path
				// ended, as it does for any bad address.
				t.Logf("the scan ended at %#x (%s): %v", a, sp.line, err)
				return found, read
			}
			read += n
			for _, nd := range needles {
				if bytes.Contains(got, nd) {
					found = append(found, fmt.Sprintf("%q at %s", nd, sp.line))
				}
			}
		}
	}
	return found, read
}

const roleContainedExporter = "share-contained-exporter"

func init() { testproc.Role(roleContainedExporter, runContainedExporter) }

// runContainedExporter is a service: it reads its secret from the file
// its argument names, holds memory it never shares (random, printed as
// "private HEX"), and shares one region in rkey mode until stdin closes.
func runContainedExporter() int {
	key, err := os.ReadFile(os.Args[len(os.Args)-1])
	if err != nil {
		return failRole(err)
	}
	private := make([]byte, 64)
	rand.Read(private)
	out("private %x", private)
	s, err := share.NewHMACSealer(key)
	if err != nil {
		return failRole(err)
	}
	mem, err := share.NewMemory(4096)
	if err != nil {
		return failRole(err)
	}
	granted := make([]byte, 64)
	rand.Read(granted)
	copy(mem.Bytes(), granted)
	out("granted %x", granted)
	e, err := share.NewExporter(s, share.WithMode(share.ModeRkey))
	if err != nil {
		return failRole(err)
	}
	if err := e.Add(context.Background(), "data", mem, share.ReadOnly); err != nil {
		return failRole(err)
	}
	l, err := net.Listen("tcp", hostAddr)
	if err != nil {
		return failRole(err)
	}
	go e.Serve(l)
	out("addr %s", l.Addr())
	bufio.NewReader(os.Stdin).ReadString('\n')
	e.Close()
	mem.Close()
	_ = private[0]
	return 0
}

func failRole(err error) int {
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// listeningPorts is the TCP ports process pid has listening sockets on.
func listeningPorts(t testing.TB, pid int) []string {
	t.Helper()
	ports, err := listeningPortsOf(pid)
	require.NoError(t, err)
	return ports
}

// listeningPortsOf is listeningPorts, with the error of a process gone.
func listeningPortsOf(pid int) ([]string, error) {
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ports []string
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			port, _ := strconv.ParseUint(hexPort, 16, 16)
			ports = append(ports, strconv.FormatUint(port, 10))
		}
	}
	return ports, nil
}

// childrenOf is the processes whose parent is pid.
func childrenOf(t testing.TB, pid int) []int { return testproc.Children(pid) }

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d/status", pid))
	return err == nil
}

// Remove whose ctx ends before a hostile importer acknowledges: the
// region is unmapped in that session's data path without the
// acknowledgement; the Revocation names the hostile session as Forced and
// a well-behaved importer's as Acknowledged; both sessions go on with the
// other region (cancelling one region's removal ends no session), and the
// hostile importer reaches none of the removed memory.
func TestContainedRemoveForcedEndsOnlyTheRegion(t *testing.T) {
	mem := newMemory(t, bytes.Repeat([]byte("before "), 1000))
	keep := newMemory(t, []byte("another region, still shared"))
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "r", mem, share.ReadWrite))
	require.NoError(t, e.Add(context.Background(), "keep", keep, share.ReadOnly))
	h := dialHostile(t, addr) // never reads its control connection: no ack
	good := dial(t, addr)
	k := h.grants["keep"]
	g := h.grants["r"]

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rev, err := e.Remove(ctx, "r")
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.Equal(t, []share.SessionID{share.SessionID(h.raw.session)}, rev.Forced)
	assert.Equal(t, []share.SessionID{good.SessionID()}, rev.Acknowledged)
	assert.Empty(t, rev.Ended)
	assert.Equal(t, int64(1), e.Stats().ForcedUnmaps)
	assert.Len(t, e.Sessions(), 2, "both sessions go on")

	got, err := h.get(k.addr, len("another region, still shared"), k.rr.Key())
	require.NoError(t, err, "the hostile session reads the region it still holds")
	assert.Equal(t, "another region, still shared", string(got))
	copy(mem.Bytes(), bytes.Repeat([]byte("AFTER-REMOVE "), 100)) // the memory is reused
	got, err = h.get(g.addr, 64, g.rr.Key())
	t.Logf("the hostile importer's get of the removed region: %v", err)
	if err == nil {
		require.False(t, bytes.Contains(got, []byte("AFTER-REMOVE")), "read reused memory after a forced Remove")
	}
	stillServes(t, addr, "keep", []byte("another region, still shared"))
	r, err := good.Region("keep")
	require.NoError(t, err)
	p := make([]byte, 7)
	_, err = r.ReadAt(p, 0)
	require.NoError(t, err, "the well-behaved session goes on")
}

// Add and Rotate wait for no importer past their ctx: an importer that
// stops reading its control connection fills it with grants until the
// exporter's write stalls; each Add returns nil at its ctx's end (the
// region is shared), the stalled session alone ends at the ack timeout,
// and a well-behaved importer holds every region.
func TestAddDoesNotWaitForAStalledImporter(t *testing.T) {
	mem := newMemory(t, bytes.Repeat([]byte("x"), 4096))
	e, addr := serve(t, share.WithMode(share.ModeRkey), share.WithAckTimeout(2*time.Second))
	small := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error { // a small window from the SYN on
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); cerr != nil {
			return cerr
		}
		return err
	}}
	h := proveHostileVia(t, small, addr, sealer(t))
	h.bind(addr) // then never reads its control connection
	shrinkSendBuffer(t, h.c.LocalAddr().(*net.TCPAddr))
	good := dial(t, addr)
	long := strings.Repeat("r", 200) // a long id makes each grant frame larger
	last := -1
	for i := 0; i < share.MaxRegions && len(e.Sessions()) == 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := e.Add(ctx, fmt.Sprintf("%s%04d", long, i), mem, share.ReadOnly)
		cancel()
		require.NoError(t, err, "Add %d", i)
		last = i
	}
	ss := e.Sessions()
	require.Len(t, ss, 1, "the stalled importer's session never ended")
	t.Logf("the stalled session ended after %d regions", last+1)
	assert.Equal(t, good.SessionID(), ss[0].ID(), "the well-behaved session goes on")
	var r *share.Region
	require.Eventually(t, func() bool { // Add returned once the grant was sent; the importer takes it in a moment
		var err error
		r, err = good.Region(fmt.Sprintf("%s%04d", long, last))
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the well-behaved importer holds every region")
	p := make([]byte, 1)
	_, err := r.ReadAt(p, 0)
	require.NoError(t, err)
	assert.Equal(t, "x", string(p))
}

// shrinkSendBuffer makes the send buffer of this process's TCP socket
// connected to peer small, as a congested path would keep it: the
// exporter's side of a control connection runs in the test's process.
func shrinkSendBuffer(t *testing.T, peer *net.TCPAddr) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, d := range fds {
		fd, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		sa, err := syscall.Getpeername(fd)
		if err != nil {
			continue
		}
		var port int
		var ip net.IP
		switch a := sa.(type) {
		case *syscall.SockaddrInet4:
			port, ip = a.Port, a.Addr[:]
		case *syscall.SockaddrInet6:
			port, ip = a.Port, a.Addr[:]
		default:
			continue
		}
		if port == peer.Port && ip.Equal(peer.IP) {
			require.NoError(t, syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096))
			return
		}
	}
	t.Fatalf("no socket of this process is connected to %v", peer)
}

// A write-only grant in rkey mode is enforced by the importer's library,
// not by the exporter: the page it maps cannot be writable and not
// readable, and UCX's RMA over tcp checks no key's protection. A hostile
// importer holding one reads the region (docs/security.md says so); its
// grant's protection says write-only all the same.
func TestContainedWriteOnlyGrantIsReadable(t *testing.T) {
	want := bytes.Repeat([]byte("write-only "), 100)
	mem := newMemory(t, want)
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "wo", mem, share.WriteOnly))
	h := dialHostile(t, addr)
	g := h.grants["wo"]
	require.Equal(t, uint32(ucp.ProtRemoteWrite), g.prot&uint32(ucp.ProtRemoteRead|ucp.ProtRemoteWrite), "the grant says write-only")
	got, err := h.get(g.addr, 32, g.rr.Key())
	require.NoError(t, err, "the get through a write-only grant")
	assert.Equal(t, want[:32], got, "a hostile importer reads a write-only region in rkey mode (documented)")
}
