package share_test

// Faults with the importer or the exporter in another process: killed
// peers, revocation, lease expiry and rotation under load, a wrong secret,
// malformed frames and an altered grant. The roles are in roles_test.go.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

// bound is how long anything that must end may take before the test calls
// it a hang; no test asserts a shorter time.
const bound = 20 * time.Second

// until polls cond in the test's goroutine (cond may fail the test) and
// fails the test if it is not true within bound.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(bound):
		t.Fatalf("%s: not within %v", what, bound)
	}
}

// An importer process streaming writes, and one that holds its grant
// without using it, are killed (SIGKILL), the writer in the middle of its
// calls: the exporter ends both sessions and unmaps their registrations,
// serves the next importer (this process), which reads and writes
// correctly, and closes cleanly. The exporter is a process of its own, so
// that a crash fails this test instead of the whole test binary. A reader
// killed in the middle of its calls is TestExporterSurvivesKilledReaders:
// UCX can abort the exporter then.
func TestImporterKilledMidTransfer(t *testing.T) {
	t.Parallel()
	const size = 1 << 20 // 64 operations of 16 KiB a call: the kill lands in one
	exp, addr := startExporter(t, nil, "-regions", fmt.Sprintf("r:%d:1:r,w:%d:0:rw", size, size))
	idleP := startImporter(t, nil, "-connect", addr)
	writerP := startImporter(t, nil, "-connect", addr, "-write", "w:2", "-chunk", "16384")
	idleP.WaitLine(t, "READY", bound)
	writerP.WaitLine(t, "STREAMING", bound)

	assert.Equal(t, "n=2 live=2,2", ask(t, exp, "watch", "WATCHING"), "a registration per region and session")
	idleP.Kill()
	writerP.Kill()
	assert.Equal(t, "killed", idleP.Signal(t, bound))
	assert.Equal(t, "killed", writerP.Signal(t, bound))
	for range 2 {
		f := fields(exp.WaitLine(t, "ENDED", bound))
		assert.Equal(t, "0", f["live"], "registrations left after the session's end")
		t.Logf("session %s ended: %s", f["id"], f["msg"])
	}
	st := exporterStats(t, exp)
	assert.Zero(t, st.Importers)
	assert.Empty(t, st.Sessions)
	assert.Equal(t, int64(2), st.Served)
	assert.Equal(t, int64(2), st.Regions)

	// The next importer is served: it reads r and writes all of w.
	imp := dial(t, addr)
	rr, err := imp.Region("r")
	require.NoError(t, err)
	got := make([]byte, size)
	_, err = rr.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, -1, checkPattern(got, 1), "the next importer reads the exporter's bytes")
	wr, err := imp.Region("w")
	require.NoError(t, err)
	_, err = wr.WriteAt(pattern(size, 3), 0)
	require.NoError(t, err)
	assert.Equal(t, "ok", ask(t, exp, fmt.Sprintf("check w 3 0 %d", size), "CHECK"), "the next importer's write is in the exporter's memory")
	require.NoError(t, imp.Close())
	exp.CloseStdin()
	assert.Equal(t, "err=<nil>", exp.WaitLine(t, "CLOSED", bound))
	assert.Equal(t, 0, exp.Wait(t, bound), "the exporter's exit code")
}

// A killed importer did not end its session cleanly: the session says so
// (Session.Err), and the exporter counts it (Stats.Errors, and Forced: its
// registrations were unmapped without an acknowledgement), whichever it
// sees first: the control connection's end without a bye, or the UCX
// endpoint's failure (it used to end such a session with nil when the
// connection's end came first).
func TestKilledImporterEndsSessionWithError(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(64<<10, 1))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "r", mem, share.ReadOnly))
	// Importers that hold their grant and do nothing (one killed while it
	// reads can abort this process: TestExporterSurvivesKilledReaders); two
	// killed at once are two samples of what was a race.
	const n = 2
	var ps []*testproc.Proc
	for range n {
		ps = append(ps, startImporter(t, nil, "-connect", addr))
	}
	for _, p := range ps {
		p.WaitLine(t, "READY", bound)
	}
	sessions := e.Sessions()
	require.Len(t, sessions, n)
	for _, p := range ps {
		p.Kill()
	}
	for _, s := range sessions {
		waitClosed(t, s.Done(), "the session's end")
		assert.Error(t, s.Err(), "%s: a session whose importer died is not a clean end (Session.Err)", s)
	}
	st := e.Stats()
	assert.Equal(t, int64(n), st.Errors, "Stats.Errors")
	assert.Equal(t, int64(n), st.Forced, "Stats.Forced: ended holding a registration nobody acknowledged")
}

// An importer that closes cleanly (it acknowledges every grant, then says
// bye) ends its session cleanly: Session.Err nil, no error or forced end
// counted, every grant acknowledged (the exporter used to see the
// importer's UCX endpoint go away before it read the acknowledgement and
// the bye, and end most such sessions with "the importer's endpoint
// failed"). Three rounds: three samples of what was a race.
func TestCleanImporterCloseIsNotAnError(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(64<<10, 1))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	const rounds = 3
	for i := range rounds {
		imp := dial(t, addr)
		r, err := imp.Region("a")
		require.NoError(t, err)
		_, err = r.ReadAt(make([]byte, 4096), 0)
		require.NoError(t, err)
		sessions := e.Sessions()
		require.Len(t, sessions, 1)
		require.NoError(t, imp.Close())
		waitClosed(t, sessions[0].Done(), "the session's end")
		assert.NoError(t, sessions[0].Err(), "round %d: the session of an importer that closed", i)
	}
	st := e.Stats()
	assert.Zero(t, st.Errors, "Stats.Errors")
	assert.Zero(t, st.Forced, "Stats.Forced")
	assert.Equal(t, int64(rounds), st.Acks, "every grant acknowledged")
}

// The exporter process is killed while this process, the importer, streams
// reads of one region and writes to another: both streams fail (with
// ErrRevoked, or a UCX error), the session ends (Revoked), later calls
// fail, and Close returns.
func TestExporterKilledMidTransfer(t *testing.T) {
	t.Parallel()
	exp, addr := startExporter(t, nil, "-regions", fmt.Sprintf("r:%d:1:r,w:%d:2:rw", 1<<20, 1<<20))
	imp := dial(t, addr, share.WithChunk(16<<10)) // 64 operations a call
	rr, err := imp.Region("r")
	require.NoError(t, err)
	wr, err := imp.Region("w")
	require.NoError(t, err)
	stop := make(chan struct{})
	streams := []*stream{newStream("read", imp, rr, 1, 0), newStream("write", imp, wr, 5, 0)}
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(stop, nil) }()
	}
	defer func() { close(stop); wg.Wait() }()
	for _, s := range streams {
		waitClosed(t, s.first, s.op+" stream started")
	}
	exp.Kill()
	killed := time.Now()
	for _, s := range streams {
		waitClosed(t, s.failed, "the "+s.op+" stream failed")
	}
	t.Logf("both streams failed %v after the kill", time.Since(killed).Round(time.Millisecond))
	for _, s := range streams {
		var st ucs.Status
		assert.True(t, errors.Is(s.err, share.ErrRevoked) || errors.As(s.err, &st), "the %s failed with ErrRevoked or a UCX error: %v", s.op, s.err)
		t.Logf("the %s failed: %v", s.op, s.err)
	}
	waitClosed(t, imp.Revoked(), "Importer.Revoked")
	assert.ErrorIs(t, imp.Err(), share.ErrRevoked)
	for _, s := range streams {
		assert.Zero(t, s.wrong.Load(), "reads that saw other bytes")
		f := s.fails.Load()
		until(t, "the "+s.op+" stream's calls fail", func() bool { return s.fails.Load() > f })
	}
	closed := make(chan error, 1)
	go func() { closed <- imp.Close() }()
	select {
	case err := <-closed:
		assert.NoError(t, err)
	case <-time.After(bound):
		t.Fatal("Importer.Close hangs")
	}
}

// An importer process streams reads when the exporter revokes it: Revoke
// returns once it acknowledged, no read that started after the importer
// saw the revocation succeeds, and the bytes the exporter writes right
// after Revoke returned are never read.
func TestRevokeUnderLoad(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(256<<10, 1))
	a := mem.Bytes()
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	p := startImporter(t, nil, "-connect", addr, "-read", "a:1", "-chunk", "16384")
	p.WaitLine(t, "STREAMING", bound)

	var acked atomic.Int64 // ns from Revoke's call to the acknowledgement
	start := time.Now()
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for time.Since(start) < bound {
			if e.Stats().Acks > 0 {
				acked.Store(int64(time.Since(start)))
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	err := errOf(e.Revoke(ctx))
	took := time.Since(start)
	copy(a, pattern(len(a), 2)) // what no read may see
	cancel()
	<-pollDone
	require.NoError(t, err)
	t.Logf("revoke under load: acknowledged %v after Revoke was called, Revoke returned after %v",
		time.Duration(acked.Load()).Round(time.Microsecond), took.Round(time.Microsecond))

	f := fields(p.WaitLine(t, "FAIL read", bound))
	assert.Equal(t, "true", f["revoked"], "the reads fail with ErrRevoked: %s", f["msg"])
	// The importer goes on trying after the bytes changed.
	before := fields(ask(t, p, "count", "COUNT"))
	until(t, "5 more failed reads", func() bool {
		return atoi(t, fields(ask(t, p, "count", "COUNT"))["fails"]) >= atoi(t, before["fails"])+5
	})
	res, rest := results(t, p)
	read := res["read"]
	assert.Equal(t, "0", read["after"], "reads that succeeded after the importer saw the revocation")
	assert.Equal(t, "0", read["wrong"], "reads that saw the bytes written after Revoke returned (or other bytes)")
	assert.Equal(t, "true", read["revoked"])
	assert.Contains(t, rest["ERR"], "revoked=true")
	st := e.Stats()
	assert.Equal(t, int64(1), st.Revocations)
	assert.Equal(t, int64(1), st.Acks)
	assert.Zero(t, st.Forced)
	assert.Zero(t, st.Importers, "the revoked importer's session ended")
}

// A process importer streams reads when its lease expires: the exporter
// revokes it (the region's Revoked closes: not only the importer's own
// clock refused), the importer acknowledges, and no read succeeds after.
func TestLeaseExpiryProcessImporter(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(256<<10, 1))
	e, addr := serve(t, share.WithLease(time.Second))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	p := startImporter(t, nil, "-connect", addr, "-read", "a:1")
	p.WaitLine(t, "STREAMING", bound)
	f := fields(p.WaitLine(t, "FAIL read", bound))
	assert.Equal(t, "true", f["revoked"], "%s", f["msg"])
	assert.Contains(t, f["msg"], "expire")
	require.Eventually(t, func() bool { st := e.Stats(); return st.Acks == 1 && st.Expired == 1 }, bound, 5*time.Millisecond,
		"the importer acknowledged the expiry")
	st := e.Stats()
	res, _ := results(t, p)
	assert.Equal(t, "0", res["read"]["after"])
	assert.Equal(t, "0", res["read"]["wrong"])
	assert.Equal(t, "true", res["read"]["revoked"], "the exporter's revocation reached the region")
	assert.Equal(t, int64(1), st.Expired)
	assert.Equal(t, int64(1), st.Revocations)
	assert.Zero(t, st.Forced)
}

// A process importer streams reads through three rotations: none fails or
// sees other bytes, reads go on between rotations, and each old
// registration is acknowledged.
func TestRotateUnderLoadProcessImporter(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(256<<10, 1))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	p := startImporter(t, nil, "-connect", addr, "-read", "a:1", "-chunk", "16384")
	p.WaitLine(t, "STREAMING", bound)
	reads := func() int64 { return atoi(t, fields(ask(t, p, "count", "COUNT"))["read"]) }
	for range 3 {
		before := reads()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		require.NoError(t, errOf(e.Rotate(ctx, "a", 5*time.Second)))
		cancel()
		until(t, "reads go on after the rotation", func() bool { return reads() > before+1 })
	}
	st := e.Stats() // before the importer closes
	res, rest := results(t, p)
	assert.Equal(t, "0", res["read"]["fails"], "reads that failed during the rotations")
	assert.Equal(t, "0", res["read"]["wrong"])
	assert.Contains(t, rest["ISTATS"], `"rotations":3`)
	assert.Equal(t, int64(3), st.Rotations)
	assert.Equal(t, int64(4), st.Grants)
	assert.Equal(t, int64(3), st.Acks)
	assert.Zero(t, st.Forced)
}

// frame is one control-protocol frame: u32 LE length of what follows, u8
// type, payload.
func frame(typ byte, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(1+len(payload)))
	return append(append(b, typ), payload...)
}

// readFrames reads frames until the connection ends; err is what ended
// it (io.EOF, a reset, a timeout).
func readFrames(c net.Conn) (types []byte, payloads [][]byte, err error) {
	for {
		var h [5]byte
		if _, err = io.ReadFull(c, h[:]); err != nil {
			return types, payloads, err
		}
		n := binary.LittleEndian.Uint32(h[:4])
		if n == 0 || n > 1<<20 {
			return types, payloads, fmt.Errorf("a frame of %d bytes", n)
		}
		p := make([]byte, n-1)
		if _, err = io.ReadFull(c, p); err != nil {
			return types, payloads, err
		}
		types, payloads = append(types, h[4]), append(payloads, p)
	}
}

const (
	frameRefuse = 3
	frameGrant  = 4
	causeSeal   = 1 // ErrSeal's code in a refusal (ErrRefused is 0)
)

// Importer processes with another secret are refused with ErrSeal, not a
// UCX error (the exporter answers the proof before the importer's UCX
// connects: before it did, the importer often failed first with "Operation
// rejected by remote peer"), and the exporter counts the refusals. Two at
// once: two samples of what was a race.
func TestWrongKeyProcessImporter(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(4096, 1))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	const n = 2
	var ps []*testproc.Proc
	for range n {
		ps = append(ps, startImporter(t, nil, "-connect", addr, "-secret", "another secret of enough length"))
	}
	for _, p := range ps {
		f := fields(p.WaitLine(t, "DIALERR", bound))
		assert.Equal(t, "true", f["seal"], "the importer with another secret: %s", f["msg"])
		assert.Equal(t, "false", f["ucx"], "%s", f["msg"])
		assert.Equal(t, 3, p.Wait(t, bound))
	}
	require.Eventually(t, func() bool { return e.Stats().Refused == n }, bound, 5*time.Millisecond)
	assert.Zero(t, e.Stats().Importers)
}

// Clients that send garbage, a frame cut short, a truncated hello, a hello
// of another protocol version, a frame longer than the protocol allows or
// another frame than a hello are refused at once: the exporter closes the
// connection (after a refusal frame, where it says why), does not wait for
// more, and counts them; and it serves the next importer.
func TestBadFramesRefused(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(64<<10, 1))
	a := mem.Bytes()
	e, addr := serve(t, share.WithHandshakeTimeout(bound))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadWrite))
	for _, c := range badFrames {
		t.Run(c.name, func(t *testing.T) {
			types, payloads := sendRaw(t, addr, c.send)
			for i, typ := range types {
				require.Equal(t, byte(frameRefuse), typ, "frame %d of the answer", i)
			}
			if c.refuse != "" {
				require.NotEmpty(t, types, "a refusal")
				assert.Contains(t, string(payloads[0][1:]), c.refuse)
			}
		})
	}
	require.Eventually(t, func() bool { return e.Stats().Refused == int64(len(badFrames)) }, bound, 5*time.Millisecond,
		"every session refused at the handshake counted")
	assert.Zero(t, e.Stats().Importers)

	// A well-behaved importer is served.
	imp := dial(t, addr)
	r, err := imp.Region("a")
	require.NoError(t, err)
	got := make([]byte, len(a))
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, -1, checkPattern(got, 1))
	_, err = r.WriteAt(pattern(100, 9), 10)
	require.NoError(t, err)
	assert.Equal(t, -1, checkPattern(a[10:110], 9))
}

// badFrames are what TestBadFramesRefused sends.
var badFrames = []struct {
	name   string
	send   []byte
	refuse string // what the refusal must say, if one must come
}{
	{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ""},
	{"cut mid-frame", frame(1, rawHello(wireVersion, "192.0.2.2:1"))[:9], ""},
	{"truncated hello", frame(1, rawHello(wireVersion, "192.0.2.2:1")[:11]), "truncated hello"},
	{"previous protocol version", frame(1, rawHello(wireVersion-1, "")), "protocol version 2, this exporter 3"},
	{"other protocol version", frame(1, rawHello(wireVersion+1, "")), "protocol version 4, this exporter 3"},
	{"oversized frame", append(binary.LittleEndian.AppendUint32(nil, 128<<10+1), 1), ""},
	{"hello over the hello's limit", append(binary.LittleEndian.AppendUint32(nil, 513), 1), ""},
	{"another address dialed", frame(1, rawHello(wireVersion, "192.0.2.99:13337")), "which is not this exporter's address"},
	{"not a hello", frame(9, make([]byte, 48)), ""},
}

// sendRaw sends b on a new connection to addr, closes its writing side,
// and returns the frames that come back before the exporter closes the
// connection; it fails the test if the exporter does not close it.
func sendRaw(t *testing.T, addr string, b []byte) ([]byte, [][]byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(b)
	require.NoError(t, err)
	conn.(*net.TCPConn).CloseWrite() // fails if the exporter has closed already
	// The handshake timeout is the bound: an exporter that waits for more
	// meets this deadline first.
	conn.SetReadDeadline(time.Now().Add(bound / 2))
	types, payloads, err := readFrames(conn)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the exporter did not close the connection")
	return types, payloads
}

// One refusal says why the exporter ends a session, and the connection
// ends: a truncated hello (a protocol violation found while decoding the
// hello) gets exactly one. Today it gets two: the handshake refuses it,
// and the end of the session refuses a protocol violation again.
func TestProtocolViolationRefusedOnce(t *testing.T) {
	t.Parallel()
	_, addr := serve(t)
	types, _ := sendRaw(t, addr, frame(1, rawHello(wireVersion, "192.0.2.2:1")[:11]))
	assert.Equal(t, []byte{frameRefuse}, types, "the frames in answer")
}

// mitm relays one importer's control connection to target, passing each
// frame from the exporter through alter (which may change its payload in
// place) and recording the types and payloads of the importer's frames.
type mitm struct {
	l      net.Listener
	target string
	alter  func(typ byte, p []byte)
	// keep: cut closes the importer's side only; the exporter's stays
	// open, so that the exporter sees nothing.
	keep    bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	fromImp [][]byte // type byte and payload
	conns   []net.Conn
}

// startMITM relays l's connections (an address the exporter was told
// importers dial: share.WithDialAddresses) to target.
func startMITM(t *testing.T, l net.Listener, target string, alter func(typ byte, p []byte), keep bool) *mitm {
	m := &mitm{l: l, target: target, alter: alter, keep: keep}
	m.wg.Add(1)
	go m.accept()
	t.Cleanup(func() {
		m.l.Close()
		m.mu.Lock()
		for _, c := range m.conns {
			c.Close()
		}
		m.mu.Unlock()
		m.wg.Wait()
	})
	return m
}

func (m *mitm) accept() {
	defer m.wg.Done()
	for {
		imp, err := m.l.Accept()
		if err != nil {
			return
		}
		exp, err := net.Dial("tcp", m.target)
		if err != nil {
			imp.Close()
			continue
		}
		m.mu.Lock()
		m.conns = append(m.conns, imp, exp)
		m.mu.Unlock()
		m.wg.Add(2)
		go m.relay(exp, imp, m.alter, nil)
		go m.relay(imp, exp, nil, func(f []byte) {
			m.mu.Lock()
			m.fromImp = append(m.fromImp, f)
			m.mu.Unlock()
		})
	}
}

// cutImporter closes the importer's side of every connection.
func (m *mitm) cutImporter() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := 0; i < len(m.conns); i += 2 {
		m.conns[i].Close()
	}
}

func (m *mitm) relay(from, to net.Conn, alter func(byte, []byte), record func([]byte)) {
	defer m.wg.Done()
	if !m.keep {
		defer to.Close()
		defer from.Close()
	}
	for {
		var h [5]byte
		if _, err := io.ReadFull(from, h[:]); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(h[:4])
		if n == 0 || n > 1<<20 {
			return
		}
		p := make([]byte, n-1)
		if _, err := io.ReadFull(from, p); err != nil {
			return
		}
		if alter != nil {
			alter(h[4], p)
		}
		if record != nil {
			record(append([]byte{h[4]}, p...))
		}
		if _, err := to.Write(append(h[:], p...)); err != nil {
			return
		}
	}
}

func (m *mitm) importerFrames() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.fromImp...)
}

// A man in the middle flips one bit of the first grant, in its key: the
// importer refuses it with ErrSeal, not a UCX or grant error, so the key
// never reached UCX; it tells the exporter why, and the exporter ends that
// session and serves the next importer.
func TestAlteredGrantRefused(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(64<<10, 1))
	a := mem.Bytes()
	pl := listen(t)
	e, addr := serve(t, share.WithDialAddresses(pl.Addr().String()))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	var once sync.Once
	m := startMITM(t, pl, addr, func(typ byte, p []byte) {
		if typ == frameGrant {
			// The sealed grant ends with the key and a 32-byte MAC: this
			// is the key's last byte.
			once.Do(func() { p[len(p)-33] ^= 0x10 })
		}
	}, false)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, err := share.Dial(ctx, "tcp", m.l.Addr().String(), sealer(t))
	require.Error(t, err)
	assert.ErrorIs(t, err, share.ErrSeal)
	assert.NotErrorIs(t, err, share.ErrGrant)
	var st ucs.Status
	assert.False(t, errors.As(err, &st), "a UCX status: the key reached UCX: %v", err)
	require.Eventually(t, func() bool { return e.Stats().Errors > 0 && e.Stats().Importers == 0 }, bound, 5*time.Millisecond,
		"the exporter ends the session the importer refused")
	var refusals [][]byte
	require.Eventually(t, func() bool {
		refusals = refusals[:0]
		for _, f := range m.importerFrames() {
			if f[0] == frameRefuse {
				refusals = append(refusals, f)
			}
		}
		return len(refusals) > 0
	}, bound, 5*time.Millisecond, "the importer tells the exporter why")
	require.Len(t, refusals, 1, "the importer's refusal frames")
	assert.Equal(t, byte(causeSeal), refusals[0][1], "the importer's refusal names ErrSeal")

	imp := dial(t, addr)
	r, err := imp.Region("a")
	require.NoError(t, err)
	got := make([]byte, len(a))
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, -1, checkPattern(got, 1))
}

// The exporter counts a session the importer refused (it refused an
// altered grant) as one error (it used to count two: once when the
// refusal arrived, once more when the session ended with it).
func TestRefusedGrantCountedOnce(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(4096, 1))
	pl := listen(t)
	e, addr := serve(t, share.WithDialAddresses(pl.Addr().String()))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	var once sync.Once
	m := startMITM(t, pl, addr, func(typ byte, p []byte) {
		if typ == frameGrant {
			once.Do(func() { p[len(p)-33] ^= 0x10 })
		}
	}, false)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, err := share.Dial(ctx, "tcp", m.l.Addr().String(), sealer(t))
	require.ErrorIs(t, err, share.ErrSeal)
	require.Eventually(t, func() bool { return e.Stats().Importers == 0 && e.Stats().Errors > 0 }, bound, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // a second count, if any, comes at once
	assert.Equal(t, int64(1), e.Stats().Errors, "one session ended with an error")
}

// Importer.Revoked says every region is revoked once it is closed: a call
// started after it closed fails with ErrRevoked and does not reach the
// exporter's memory. Here the importer loses its control connection (a
// man in the middle closes the importer's side; the exporter's side and
// the UCX connection stay up) and, as soon as Revoked is closed, reads each
// of its regions. Before every region refused calls ahead of Revoked's
// closing, such reads succeeded (1 to 5 of 160), reaching the exporter's
// memory after the session was over.
func TestRegionsRevokedWhenSessionEnds(t *testing.T) {
	t.Parallel()
	const regions = 32
	var mems []*share.Memory
	for i := range regions {
		mems = append(mems, memory(t, pattern(4096, byte(i))))
	}
	pl := listen(t)
	e, addr := serve(t, share.WithDialAddresses(pl.Addr().String()))
	for i, mem := range mems {
		require.NoError(t, e.Add(context.Background(), fmt.Sprintf("r%02d", i), mem, share.ReadOnly))
	}
	m := startMITM(t, pl, addr, nil, true)
	succeeded := 0
	buf := make([]byte, 4096)
	const rounds = 5 // a race: five sessions, 32 reads each
	for range rounds {
		imp := dial(t, m.l.Addr().String())
		rs := imp.Regions()
		require.Len(t, rs, regions)
		m.cutImporter()
		for !closedChan(imp.Revoked()) {
		}
		for i := len(rs) - 1; i >= 0; i-- {
			if _, err := rs[i].ReadAt(buf, 0); err == nil {
				succeeded++
			} else {
				assert.ErrorIs(t, err, share.ErrRevoked)
			}
		}
		require.NoError(t, imp.Close())
	}
	assert.Zero(t, succeeded, "reads that succeeded after Importer.Revoked closed (of %d)", rounds*regions)
}

// Importer processes killed while they stream reads: the exporter
// survives (ends their sessions, goes on serving, closes cleanly). Over
// tcp a get is emulated with active messages, and UCX's reply for a reader
// that just died can end in ucs_fatal "unexpected error: Endpoint timeout"
// (ucp_get_req_handler; docs/behaviour.md, known UCX issues): it aborted
// the exporter in 2 of 8 runs while the exporter served gets itself; now
// it ends that session's data path at most. Four readers killed at once,
// twice, with small operations (many gets in flight); the second round's
// readers are the next importers, and read correctly until killed.
func TestExporterSurvivesKilledReaders(t *testing.T) {
	t.Parallel()
	exp, addr := startExporter(t, nil, "-regions", fmt.Sprintf("r:%d:1:r", 256<<10))
	const readers, rounds = 4, 2
	for round := range rounds {
		var ps []*testproc.Proc
		for range readers {
			ps = append(ps, startImporter(t, nil, "-connect", addr, "-read", "r:1", "-chunk", "16384"))
		}
		for _, p := range ps {
			p.WaitLine(t, "STREAMING", bound)
		}
		require.Equal(t, fmt.Sprintf("n=%d live=1,1,1,1", readers), ask(t, exp, "watch", "WATCHING"))
		for _, p := range ps {
			p.Kill()
		}
		for range readers {
			exp.WaitLine(t, "ENDED", bound)
		}
		for _, p := range ps {
			assert.NotContains(t, p.Output(), "WRONG", "a reader saw other bytes")
		}
		assert.Zero(t, exporterStats(t, exp).Importers, "round %d", round)
	}
	exp.CloseStdin()
	assert.Equal(t, "err=<nil>", exp.WaitLine(t, "CLOSED", bound))
	assert.Equal(t, 0, exp.Wait(t, bound), "the exporter's exit code")
}
