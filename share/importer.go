package share

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// Defaults of the importer's options.
const (
	DefaultDepth   = 4
	DefaultChunk   = 512 << 10
	DefaultStaging = 4 << 20
)

type importerOptions struct {
	want      Mode
	depth     int
	chunk     int
	staging   int
	handshake time.Duration
	config    [][2]string
	name      string
	skew      time.Duration
	log       *slog.Logger
}

// WithRequireMode makes the session fail unless the exporter runs in mode
// m (default ModeAuto: whichever it offers): Dial and NewImporter fail with an
// error wrapping ErrRefused when the exporter runs in another mode, and,
// for ModeExport on a machine where no memory domain can import exported
// keys (uct.HaveExportedMkey), with one wrapping ucs.ErrUnsupported
// before the exporter is contacted.
func WithRequireMode(m Mode) ImporterOption {
	return importerOption(func(o *importerOptions) { o.want = m })
}

// WithDepth bounds the RMA operations one call keeps in flight (default
// DefaultDepth).
func WithDepth(n int) ImporterOption { return importerOption(func(o *importerOptions) { o.depth = n }) }

// WithChunk is the size of one RMA operation of a call (default
// DefaultChunk).
func WithChunk(n int) ImporterOption { return importerOption(func(o *importerOptions) { o.chunk = n }) }

// WithStaging is the size of the offload area of the staging file in rkey
// mode (default DefaultStaging): the largest active message SendAM and
// ReceiveAM move, and what CopyTo and CopyFrom move at a time (in halves).
func WithStaging(n int) ImporterOption {
	return importerOption(func(o *importerOptions) { o.staging = n })
}

// WithClockSkew is how far the exporter's clock may run ahead of this
// one's when a grant's issue time is checked (default 2s).
func WithClockSkew(d time.Duration) ImporterOption {
	return importerOption(func(o *importerOptions) { o.skew = d })
}

// Importer is one session with an exporter: the regions it granted, read
// and written in place through ReadAt and WriteAt, and moved to or from
// third peers by the offload calls. In rkey mode the session's UCX runs in
// a data-path process of its own, which alone connects to the exporter and
// to the third peers: no UCX runs in this process. Close drops every key and
// acknowledges; an importer that dies or loses its connection is cut off
// by the exporter.
type Importer struct {
	lg     *logger
	conn   net.Conn
	sealer Sealer
	o      importerOptions
	acc    *accepted // the exporter's parameters, once both proofs held
	// In the handshake: the hello was sent, the exporter refused, this
	// side sent a refusal.
	helloSent, peerRefused, refuseSent bool
	t3                                 [32]byte // the handshake's transcript, which the bind claim seals

	// rkey mode: the session's data path and the staging file shared with
	// it: call slots for ReadAt and WriteAt, then the offload area.
	dp       *datapath.Proc
	stage    *datapath.Memfd
	calls    chan int   // free call slots
	offBase  int        // the offload area's offset in stage
	offMu    sync.Mutex // one offload call at a time
	peers    []*Peer
	amQueues map[ucp.AMID]*AMQueue // rkey mode
	queues   []*AMQueue
	bufMu    sync.Mutex
	buffers  []*Buffer // open, for ReadAt and WriteAt without a copy

	// This process's UCX: export mode's, or made for Worker and Context.
	ucxMu   sync.Mutex
	ucxErr  error
	ctx     *ucp.Context
	w       *ucp.Worker
	runStop context.CancelFunc
	runDone chan struct{}

	wmu sync.Mutex

	mu       sync.Mutex
	regions  map[string]*Region
	closed   bool
	endErr   error
	revoked  chan struct{}
	readDone chan struct{}
	// loopStarted: the read loop runs (after the handshake), and closes
	// readDone when it ends.
	loopStarted  bool
	dpEnded      string      // why the data path ended, when that ended the session
	lastGen      uint64      // the newest generation granted in this session
	closing      bool        // shutting down: grants for new regions are dropped
	closedByUser atomic.Bool // Close was called: a region's calls then fail with ErrClosed
	every        []*Region   // every region made, those replaced by a newer one of their id too
	regionsWG    sync.WaitGroup

	st importerCounters
}

// Dial connects to an exporter's control address (network and address as
// net.Dialer takes them) and opens a session: see Open.
func Dial(ctx context.Context, network, address string, sealer Sealer, opts ...ImporterOption) (*Importer, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		cause := error(ucs.ErrUnreachable)
		switch ctx.Err() {
		case context.Canceled:
			cause = ucs.ErrCanceled
		case context.DeadlineExceeded:
			cause = ucs.ErrTimedOut
		}
		return nil, &ucs.Error{Op: "share: dial", Err: cause, Wrapped: err}
	}
	imp, err := NewImporter(ctx, c, sealer, opts...)
	if err != nil {
		c.Close()
		return nil, err
	}
	return imp, nil
}

// NewImporter opens a session over conn, a connection to an exporter's Serve (a
// TCP or Unix-socket connection, or a *tls.Conn over one): the exporter
// proves it holds the sealing secret, then this side does, both over the
// connection; then the UCX releases are checked on both sides and the
// exporter's grants come, each opened with sealer and checked field by
// field before any byte of its key reaches UCX. It returns once every
// region the exporter shares is usable. The Importer owns conn from then
// on.
//
// A party that does not prove the secret (another secret, or a relay
// between this side and the exporter) fails NewImporter with an error wrapping
// ErrSeal, and gets no proof from this side; an exporter that refuses
// (another protocol version or UCX release, a mode, its limits) fails it
// with ErrRefused and says why.
func NewImporter(ctx context.Context, conn net.Conn, sealer Sealer, opts ...ImporterOption) (*Importer, error) {
	const op = "share: open session"
	if sealer == nil {
		return nil, errs.New(op, ucs.ErrInvalidParam, "a Sealer is required (NewHMACSealer)")
	}
	o := importerOptions{depth: DefaultDepth, chunk: DefaultChunk, staging: DefaultStaging,
		handshake: DefaultHandshakeTimeout, skew: 2 * time.Second}
	for _, opt := range opts {
		opt.applyImporter(&o)
	}
	if o.depth < 1 || o.chunk < 1 || o.staging < 1 || o.handshake <= 0 || o.skew < 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "depth, chunk, staging and timeouts must be positive")
	}
	imp := &Importer{lg: newLogger(o.log), conn: conn, sealer: sealer, o: o, regions: map[string]*Region{},
		revoked: make(chan struct{}), readDone: make(chan struct{})}
	hctx, cancel := context.WithTimeout(ctx, o.handshake)
	defer cancel()
	stop := context.AfterFunc(hctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	err := imp.handshake(hctx)
	if !stop() {
		err = errors.Join(err, hctx.Err())
	}
	if err != nil {
		// The exporter hears why, unless it refused, this side said so
		// already, or the connection failed: a refusal, not a bye, since
		// no session opened.
		var st ucs.Status
		if imp.helloSent && !imp.peerRefused && !imp.refuseSent && !errors.Is(err, ucs.ErrIOError) && !errors.As(err, &st) {
			imp.send(frameRefuse, encodeRefuse(err))
		}
		imp.shutdown("the session did not open", false)
		if hctx.Err() != nil {
			return nil, &ucs.Error{Op: op, Err: ucs.ErrTimedOut, Reason: "the handshake did not finish", Wrapped: err}
		}
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	imp.lg.log(slog.LevelInfo, "share: session opened", imp.sessionAttr(), slog.String("exporter", addrString(conn.RemoteAddr())),
		slog.String("mode", imp.acc.Mode.String()), slog.String("exporter_ucx", imp.acc.UCX.String()))
	if imp.dp != nil { // started during the handshake, before the session had its id
		imp.lg.dataPath(imp.dp, imp.sessionAttr())
	}
	imp.loopStarted = true
	go imp.readLoop()
	if imp.dp != nil {
		go imp.watchDataPath()
	}
	if o.name != "" {
		if err := publish("importer."+o.name, imp, func() any { return imp.Stats() }); err != nil {
			imp.o.name = ""
			imp.Close()
			return nil, err
		}
	}
	return imp, nil
}

func (imp *Importer) send(t frameType, p []byte) error {
	imp.wmu.Lock()
	defer imp.wmu.Unlock()
	imp.conn.SetWriteDeadline(time.Now().Add(imp.o.handshake))
	return writeFrame(imp.conn, t, p)
}

func (imp *Importer) handshake(ctx context.Context) error {
	const op = "share: open session"
	local := ucs.LoadedVersion()
	canImport := uct.HaveExportedMkey() == nil
	if imp.o.want == ModeExport && !canImport {
		return &ucs.Error{Op: op, Err: ucs.ErrUnsupported, Reason: "export mode required, and no memory domain here can import exported keys", Wrapped: uct.HaveExportedMkey()}
	}
	dialed, err := dialedAddress(imp.conn)
	if err != nil {
		return err
	}
	binding, err := channelBinding(ctx, imp.conn)
	if err != nil {
		return err
	}
	// 1. The hello: a nonce and the address dialed, nothing else.
	hi := importerHello{Proto: protoVersion, Dialed: dialed, TLS: binding != nil}
	rand.Read(hi.Nonce[:])
	hib := hi.encode()
	if err := imp.send(frameHelloImporter, hib); err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "sending the hello", Wrapped: err}
	}
	imp.helloSent = true
	// 2. The exporter proves the secret over this connection first.
	t, p, err := readFrameMax(imp.conn, maxHelloFrame)
	if err != nil {
		why := "no hello from the exporter"
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			why = "the exporter closed the connection before its hello (it is at its limits on connections in their handshake, see Limits, or it is not a share exporter)"
		}
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: why, Wrapped: err}
	}
	if t == frameRefuse {
		return imp.refusedBy(op, p)
	}
	if t != frameHelloExporter {
		return protoErr(op, "the exporter's first frame is a %s, not a hello", t)
	}
	h, err := decodeExporterHello(p)
	if err != nil {
		return err
	}
	if h.Proto != protoVersion {
		return &ucs.Error{Op: op, Err: ErrRefused, Reason: fmt.Sprintf("the exporter speaks protocol version %d, this importer %d", h.Proto, protoVersion)}
	}
	var tr transcript
	tr.first(hib, binding, h.Nonce)
	if !checkSealed(imp.sealer, h.Proof, proofMessage(exporterProofLabel, tr.t1)) {
		return &ucs.Error{Op: op, Err: ErrSeal, Reason: "the exporter did not prove the shared secret on this connection: " +
			"the two sides hold different secrets, or the party dialed is not the exporter (a relay)"}
	}
	// 3. This side's proof, over everything so far and its parameters.
	ip := importerProof{UCX: local, CanImport: canImport, Want: imp.o.want}
	tr.second(p, ip.params())
	if ip.Proof, err = imp.sealer.Seal(proofMessage(importerProofLabel, tr.t2)); err != nil {
		return &ucs.Error{Op: op, Err: ErrSeal, Reason: "the Sealer failed", Wrapped: err}
	}
	if len(ip.Proof) > maxSealed {
		return &ucs.Error{Op: op, Err: ErrSeal, Reason: fmt.Sprintf("the Sealer made a %d-byte proof (at most %d)", len(ip.Proof), maxSealed)}
	}
	if err := imp.send(frameProof, ip.encode()); err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "sending the proof", Wrapped: err}
	}
	tr.third(ip.Proof)
	imp.t3 = tr.t3
	// Where the session can only be in rkey mode, its data path starts
	// while the exporter checks the proof; it connects once accepted.
	var started chan error
	startDP := func() {
		started = make(chan error, 1)
		go func() { started <- imp.startDataPath(ctx) }()
	}
	defer func() {
		if started != nil {
			<-started // the data path, if it started, ends with the session (teardown)
		}
	}()
	if imp.o.want == ModeRkey || !canImport {
		startDP()
	}
	// 4. The exporter's parameters, sealed over the transcript.
	if t, p, err = readFrameMax(imp.conn, maxAcceptedFrame); err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "no answer to the proof", Wrapped: err}
	}
	switch t {
	case frameAccepted:
	case frameRefuse:
		return imp.refusedBy(op, p)
	default:
		return protoErr(op, "expected the exporter to accept the proof, got a %s", t)
	}
	msg, err := imp.sealer.Open(p)
	if err != nil {
		return &ucs.Error{Op: op, Err: ErrSeal, Reason: "the accepted message does not authenticate under this importer's secret"}
	}
	acc, err := decodeAccepted(msg, tr.t3)
	if err != nil {
		return err
	}
	if err := compatible(acc.UCX, local); err != nil {
		return err
	}
	if imp.o.want != ModeAuto && acc.Mode != imp.o.want {
		return &ucs.Error{Op: op, Err: ErrRefused, Reason: fmt.Sprintf("%s mode required, and the exporter offers %s mode", imp.o.want, acc.Mode)}
	}
	imp.acc = acc
	if acc.Mode == ModeExport {
		if _, err := imp.ucx(); err != nil {
			return err
		}
	} else {
		_, peer, err := dataHosts(imp.conn)
		if err != nil {
			return err
		}
		if started == nil {
			startDP()
		}
		err = <-started
		started = nil
		if err != nil {
			return imp.bothReleases(err)
		}
		ports, err := imp.dp.Connect(ctx, netip.AddrPortFrom(peer, acc.Port))
		if err != nil {
			return imp.bothReleases(wrapDP("share: session data path", err))
		}
		if len(ports) > maxDataPorts {
			return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: fmt.Sprintf("the session's data path holds %d connections with the exporter's host (at most %d)", len(ports), maxDataPorts)}
		}
		if err := imp.send(frameDataPorts, encodeDataPorts(ports)); err != nil {
			return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "sending the data ports", Wrapped: err}
		}
	}
	// Grants until ready.
	for {
		t, p, err := readFrame(imp.conn)
		if err != nil {
			return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "the exporter's grants did not arrive", Wrapped: err}
		}
		switch t {
		case frameGrant:
			g, err := imp.openGrant(p)
			if err != nil {
				imp.refuse(err)
				return err
			}
			imp.mu.Lock()
			r := imp.regions[g.Region]
			imp.mu.Unlock()
			if r != nil && r.Err() == nil { // a newer grant of a region granted in this handshake
				r.events <- regionEvent{grant: g}
				continue
			}
			r = imp.newRegion(g)
			if err := r.install(ctx, g); err != nil {
				imp.refuse(err)
				return imp.bothReleases(err)
			}
		case frameRevoke:
			if err := imp.onRevoke(p); err != nil {
				imp.refuse(err)
				return err
			}
		case frameReady:
			if len(p) != 0 {
				return protoErr(op, "a ready frame with %d bytes", len(p))
			}
			return nil
		case frameRefuse:
			return imp.refusedBy(op, p)
		default:
			return protoErr(op, "unexpected %s frame during the handshake", t)
		}
	}
}

// refusedBy is the error of the exporter's refusal p in the handshake.
func (imp *Importer) refusedBy(op string, p []byte) error {
	imp.peerRefused = true
	return refusedBy(op, p)
}

// refuse tells the exporter why this side ends the handshake.
func (imp *Importer) refuse(err error) {
	imp.refuseSent = true
	imp.send(frameRefuse, encodeRefuse(err))
}

func refusedBy(op string, p []byte) error {
	cause, reason := decodeRefuse(p)
	return &ucs.Error{Op: op, Err: cause, Reason: "the exporter refused: " + reason}
}

// bothReleases adds both sides' UCX releases to a UCX error met while
// setting up the data path, as a mixed pair is the likely cause.
func (imp *Importer) bothReleases(err error) error {
	var e *ucs.Error
	if !errors.As(err, &e) || imp.acc == nil {
		return err
	}
	c := *e
	c.Reason = fmt.Sprintf("%s (exporter on UCX %s, importer on UCX %s)", e.Reason, imp.acc.UCX, ucs.LoadedVersion())
	return &c
}

// openGrant authenticates a sealed grant and checks every field against
// the session before any byte of the key is used.
func (imp *Importer) openGrant(sealed []byte) (*grant, error) {
	const op = "share: open grant"
	msg, err := imp.sealer.Open(sealed)
	if err != nil {
		return nil, &ucs.Error{Op: op, Err: ErrSeal, Reason: "the grant does not authenticate under this importer's secret (a different secret, or altered on the way)"}
	}
	g, err := decodeGrant(msg)
	if err != nil {
		return nil, err
	}
	h := imp.acc
	bad := func(f string, args ...any) error {
		return &ucs.Error{Op: op, Err: ErrGrant, Reason: fmt.Sprintf(f, args...)}
	}
	now := time.Now()
	switch {
	case g.UCX != h.UCX:
		return nil, bad("the grant says UCX %s, the session's accepted message %s", g.UCX, h.UCX)
	case g.Exporter != h.Exporter:
		return nil, bad("the grant names another exporter")
	case g.Session != h.Session:
		return nil, bad("the grant is for another session")
	case g.Mode != h.Mode:
		return nil, bad("a %s-mode grant in a %s-mode session", g.Mode, h.Mode)
	case checkRegionID(op, g.Region) != nil:
		return nil, bad("region id of %d bytes is not 1 to %d bytes of UTF-8", len(g.Region), maxRegionID)
	case g.Gen == 0:
		return nil, bad("generation 0")
	case g.Prot&^uint32(ucp.ProtAll) != 0 || g.Prot&uint32(ucp.ProtRemoteRead|ucp.ProtRemoteWrite) == 0:
		return nil, bad("protection %#x grants neither remote read nor remote write, or has unknown bits", g.Prot)
	case g.Length == 0 || g.Length > 1<<48 || g.Address+g.Length < g.Address:
		return nil, bad("%d bytes at %#x is not a region", g.Length, g.Address)
	case g.Issued.After(now.Add(imp.o.skew)):
		return nil, bad("issued %s in the future (more than the %s clock skew allowed)", g.Issued.Sub(now).Round(time.Millisecond), imp.o.skew)
	case !g.Expires.After(g.Issued):
		return nil, bad("it expires before it was issued")
	case !g.Expires.After(now):
		return nil, &ucs.Error{Op: op, Err: ErrRevoked, Reason: fmt.Sprintf("the grant for region %q expired %s ago", g.Region, now.Sub(g.Expires).Round(time.Millisecond))}
	case len(g.Key) == 0:
		return nil, bad("an empty key")
	}
	if g.Mode == ModeExport {
		d, err := ucp.ParseDescriptor(g.Key)
		if err != nil {
			return nil, &ucs.Error{Op: op, Err: ErrGrant, Reason: "its key is not an exported descriptor", Wrapped: err}
		}
		if d.Address() != g.Address || d.Length() != g.Length {
			return nil, bad("the descriptor maps %d bytes at %#x, the grant says %d at %#x", d.Length(), d.Address(), g.Length, g.Address)
		}
	}
	// Generations reach the importer in increasing order: an older or
	// repeated one is a replay.
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if g.Gen <= imp.lastGen {
		return nil, bad("generation %d after generation %d: replayed or out of order", g.Gen, imp.lastGen)
	}
	imp.lastGen = g.Gen
	imp.lg.log(slog.LevelInfo, "share: grant", imp.sessionAttr(), slog.String("region", g.Region), slog.Uint64("gen", g.Gen),
		slog.String("access", accessOf(ucp.Prot(g.Prot)).String()), slog.Time("expires", g.Expires))
	return g, nil
}

// watchDataPath ends the session when its data path ends, or its
// endpoint to the exporter's fails (the exporter's data path ended): it
// closes the control connection, and the read loop ends every region with
// the reason.
func (imp *Importer) watchDataPath() {
	var why string
	select {
	case <-imp.dp.Done():
		why = "the session's data path ended: " + imp.dp.Err().Error()
	case <-imp.dp.PeerFailed():
		// An exporter that ends the session says so on the control
		// connection, but the two travel apart: give its word a moment.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-imp.readDone:
			return
		case <-t.C:
		}
		why = "the session's data connection to the exporter failed"
	case <-imp.readDone:
		return
	}
	imp.mu.Lock()
	imp.dpEnded = why
	imp.mu.Unlock()
	imp.conn.Close()
}

// readLoop handles the exporter's frames after the handshake.
func (imp *Importer) readLoop() {
	defer close(imp.readDone)
	for {
		t, p, err := readFrame(imp.conn)
		if err != nil {
			reason := "the exporter's control connection ended"
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				reason += ": " + err.Error()
			}
			imp.mu.Lock()
			if imp.dpEnded != "" {
				reason = imp.dpEnded
			}
			imp.mu.Unlock()
			imp.endAll(reason)
			return
		}
		switch t {
		case frameGrant:
			g, err := imp.openGrant(p)
			if err != nil {
				imp.st.errors.Add(1)
				imp.send(frameRefuse, encodeRefuse(err))
				imp.endAll("a grant was refused: " + err.Error())
				return
			}
			if r := imp.regionFor(g); r != nil {
				r.events <- regionEvent{grant: g}
			}
		case frameRevoke:
			if err := imp.onRevoke(p); err != nil {
				imp.send(frameRefuse, encodeRefuse(err))
				imp.endAll(err.Error())
				return
			}
		case frameBye:
			imp.endAll("the exporter ended the session")
			return
		case frameRefuse:
			_, why := decodeRefuse(p)
			imp.endAll("the exporter ended the session: " + why)
			return
		default:
			err := protoErr("share: session", "the exporter sent an unexpected %s frame", t)
			imp.send(frameRefuse, encodeRefuse(err))
			imp.endAll(err.Error())
			return
		}
	}
}

// onRevoke hands a revocation to its region, in order with its grants.
func (imp *Importer) onRevoke(p []byte) error {
	m, err := decodeRevoke(p)
	if err != nil {
		return err
	}
	imp.mu.Lock()
	r := imp.regions[m.Region]
	imp.mu.Unlock()
	imp.lg.log(slog.LevelInfo, "share: revoke", imp.sessionAttr(), slog.String("region", m.Region), slog.Uint64("gen", m.Gen),
		slog.String("reason", reasonText(m.Reason)))
	if r != nil {
		imp.st.revocations.Add(1)
		r.events <- regionEvent{revoke: m}
	}
	return nil
}

// endAll revokes every region locally: the session is over.
// Every region refuses new calls before Revoked closes; each region's
// goroutine then drops its grant once the calls in flight ended.
func (imp *Importer) endAll(reason string) {
	imp.mu.Lock()
	rs := imp.regionList()
	first := imp.endErr == nil
	if first {
		imp.endErr = &ucs.Error{Op: "share: session", Err: ErrRevoked, Reason: reason}
		for _, r := range rs {
			r.mu.Lock()
			r.setErrLocked(&ucs.Error{Op: "share: region " + r.id, Err: ErrRevoked, Reason: reason})
			r.mu.Unlock()
		}
		close(imp.revoked)
	}
	imp.mu.Unlock()
	if first && imp.acc != nil {
		imp.lg.log(slog.LevelInfo, "share: session ended", imp.sessionAttr(), slog.String("reason", reason))
	}
	for _, r := range rs {
		r.events <- regionEvent{end: reason}
	}
}

func (imp *Importer) regionList() []*Region {
	rs := make([]*Region, 0, len(imp.regions))
	for _, r := range imp.regions {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].id < rs[j].id })
	return rs
}

// Regions are the regions of this session not revoked, sorted by id.
func (imp *Importer) Regions() []*Region {
	imp.mu.Lock()
	all := imp.regionList()
	imp.mu.Unlock()
	live := all[:0]
	for _, r := range all {
		if r.Err() == nil {
			live = append(live, r)
		}
	}
	return live
}

// Region is the region id, or an error: wrapping ucs.ErrNoElem when the
// exporter never shared it in this session, ErrRevoked (with why) when it
// was revoked (removed, expired, the session ended).
func (imp *Importer) Region(id string) (*Region, error) {
	imp.mu.Lock()
	r := imp.regions[id]
	imp.mu.Unlock()
	if r == nil {
		return nil, errs.New("share: region", ucs.ErrNoElem, "the exporter shares no region %q in this session", id)
	}
	if err := r.Err(); err != nil {
		return nil, &ucs.Error{Op: "share: region", Err: ErrRevoked, Reason: "region " + id + " is revoked", Wrapped: err}
	}
	return r, nil
}

// SessionID is this session's id, the same as the exporter's Session.ID
// for it.
func (imp *Importer) SessionID() SessionID { return SessionID(imp.acc.Session) }

// Mode is the exporter's mode for this session.
func (imp *Importer) Mode() Mode { return imp.acc.Mode }

// ExporterUCX is the exporter's UCX release.
func (imp *Importer) ExporterUCX() ucs.Version { return imp.acc.UCX }

// ucx makes this process's UCX context and worker once (export mode:
// they import the exporter's keys, and hold the offload calls' peers).
func (imp *Importer) ucx() (*ucp.Context, error) {
	imp.ucxMu.Lock()
	defer imp.ucxMu.Unlock()
	if imp.ctx != nil || imp.ucxErr != nil {
		return imp.ctx, imp.ucxErr
	}
	imp.mu.Lock()
	closed := imp.closing
	imp.mu.Unlock()
	if closed {
		return nil, errs.New("share: importer UCX", ucs.ErrClosed, "the importer is closed")
	}
	features := ucp.FeatureRMA | ucp.FeatureAM
	var copts []ucp.ContextOption
	if imp.acc.Mode == ModeExport {
		features |= ucp.FeatureExportedMemh
		for _, kv := range ExportModeConfig {
			copts = append(copts, ucp.WithConfig(kv[0], kv[1]))
		}
	}
	for _, kv := range imp.o.config {
		copts = append(copts, ucp.WithConfig(kv[0], kv[1]))
	}
	copts = append(copts, ucp.WithFeatures(features), ucp.WithName("ucxshare-importer"))
	c, err := ucp.NewContext(copts...)
	if err != nil {
		imp.ucxErr = err
		return nil, err
	}
	w, err := c.NewWorker()
	if err != nil {
		c.Close()
		imp.ucxErr = err
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	imp.runStop, imp.runDone = stop, make(chan struct{})
	go func() { defer close(imp.runDone); w.Run(runCtx) }()
	imp.ctx, imp.w = c, w
	return c, nil
}

// startDataPath starts the session's data path (rkey mode): a process
// that shares the staging file with this one; its tcp sockets take the
// exporter's host only (the control connection's remote address).
func (imp *Importer) startDataPath(ctx context.Context) error {
	const op = "share: session data path"
	depth := imp.depth()
	callSize := imp.o.chunk * depth
	if callSize/depth != imp.o.chunk || callSize > 1<<30 || imp.o.staging > 1<<30 {
		return errs.New(op, ucs.ErrInvalidParam, "WithChunk %d times WithDepth %d, or WithStaging %d, is over 1 GiB", imp.o.chunk, depth, imp.o.staging)
	}
	imp.offBase = callSlots * callSize
	stage, err := datapath.NewMemfd("ucxshare-staging", imp.offBase+imp.o.staging)
	if err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrNoMemory, Reason: "the staging file", Wrapped: err}
	}
	imp.stage = stage
	imp.calls = make(chan int, callSlots)
	for i := range callSlots {
		imp.calls <- i
	}
	f, err := stage.Open(true)
	if err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "reopening the staging file", Wrapped: err}
	}
	defer f.Close()
	bind, err := imp.sealer.Seal(bindMessage(imp.t3))
	if err != nil {
		return &ucs.Error{Op: op, Err: ErrSeal, Reason: "the Sealer failed", Wrapped: err}
	}
	local, remote, err := dataHosts(imp.conn)
	if err != nil {
		return err
	}
	cfg := datapath.Config{Name: "ucxshare-importer", Peer: remote, Bind: bind, AMBind: uint16(amBind), AMAtomic: uint16(amAtomic),
		UCX: imp.o.config, Chunk: imp.o.chunk, Depth: depth, Staging: stage.Size(),
		OffBase: imp.offBase, OffSize: imp.o.staging}
	if !configures(cfg.UCX, "NET_DEVICES") {
		if err := loopbackUsable(local, ucs.LoadedVersion()); err != nil {
			return err
		}
		if dev := DevicesFacing(local); dev != "" {
			cfg.UCX = append([][2]string{{"NET_DEVICES", dev}}, cfg.UCX...)
		}
	}
	dp, err := datapath.StartImport(ctx, cfg, f)
	if err != nil {
		var ue *ucs.Error
		if errors.As(err, &ue) {
			return err
		}
		return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "the session's data path did not start", Wrapped: err}
	}
	imp.dp = dp
	imp.amQueues = map[ucp.AMID]*AMQueue{}
	dp.OnAM(imp.onAM)
	return nil
}

// callSlots is how many ReadAt and WriteAt calls of a session move at
// once in rkey mode (more wait for a slot).
const callSlots = 2

// maxDepth bounds WithDepth.
const maxDepth = 64

func (imp *Importer) depth() int { return min(imp.o.depth, maxDepth) }

// takeCall waits for a free call slot.
func (imp *Importer) takeCall(ctx context.Context) (int, error) {
	select {
	case s := <-imp.calls:
		return s, nil
	default:
	}
	select {
	case s := <-imp.calls:
		return s, nil
	case <-ctx.Done():
		return 0, errs.Ctx("share: transfer", ctx.Err(), "stopped before the first byte, waiting for a call slot")
	}
}

func (imp *Importer) giveCall(s int) { imp.calls <- s }

// Revoked is closed when the session is over: the exporter revoked this
// importer, ended the session, or its connection ended. Every region is
// revoked then. Err says why.
func (imp *Importer) Revoked() <-chan struct{} { return imp.revoked }

// Err is why the session is over (an error wrapping ErrRevoked), or nil
// while it lasts.
func (imp *Importer) Err() error {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.endErr
}

// Close ends the session: new operations fail, those in flight finish
// (bounded by the dial timeout; after it the endpoint is closed by force,
// which fails them), writes are flushed to the exporter's memory, every
// key and mapping is released, and the exporter is told (which
// acknowledges every grant). Close is safe to call more than once and
// from several goroutines, in any order with the regions' calls.
func (imp *Importer) Close() error {
	imp.mu.Lock()
	if imp.closed {
		imp.mu.Unlock()
		<-imp.readDone
		return nil
	}
	imp.closed = true
	imp.closedByUser.Store(true)
	imp.mu.Unlock()
	imp.shutdown("the importer was closed", true)
	if imp.o.name != "" {
		unpublish("importer."+imp.o.name, imp)
	}
	return nil
}

// shutdown retires every region, says bye (bye: the session had opened),
// and closes the connection and the UCX side. The read loop, if it ran, has ended when it returns.
func (imp *Importer) shutdown(reason string, bye bool) {
	imp.mu.Lock()
	imp.closing = true // no region is made from now on
	rs := append([]*Region(nil), imp.every...)
	imp.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
	defer cancel()
	retired := make(chan struct{})
	go func() {
		defer close(retired)
		for _, r := range rs {
			r.retireAll(ctx, reason)
		}
	}()
	select {
	case <-retired:
	case <-ctx.Done():
		// Calls still wait for operations the exporter does not answer:
		// ending the data path fails them.
		if imp.dp != nil {
			imp.dp.Close()
		}
		<-retired
	}
	imp.mu.Lock()
	ending := imp.endErr == nil
	if ending { // every region was retired above
		imp.endErr = &ucs.Error{Op: "share: session", Err: ucs.ErrClosed, Reason: reason}
		close(imp.revoked)
	}
	imp.mu.Unlock()
	if ending && imp.acc != nil {
		imp.lg.log(slog.LevelInfo, "share: session ended", imp.sessionAttr(), slog.String("reason", reason))
	}
	if bye {
		imp.send(frameBye, nil)
	}
	imp.conn.Close()
	if imp.loopStarted {
		<-imp.readDone
	}
	for _, r := range rs {
		close(r.events)
	}
	imp.regionsWG.Wait()
	imp.teardown()
}

// teardown closes the peers, ends the data path and closes this
// process's UCX.
func (imp *Importer) teardown() {
	imp.mu.Lock()
	peers, queues := imp.peers, imp.queues
	imp.peers, imp.queues = nil, nil
	imp.mu.Unlock()
	for _, q := range queues {
		q.closeLocal() // a Receive returns; the data path's queue ends with it
	}
	if imp.dp != nil {
		imp.dp.Close() // its peers, queues and regions with it
	}
	for _, p := range peers {
		p.Close()
	}
	imp.ucxMu.Lock()
	defer imp.ucxMu.Unlock()
	imp.ucxErr = errs.New("share: importer UCX", ucs.ErrClosed, "the importer is closed")
	if imp.stage != nil {
		imp.stage.Close()
	}
	if imp.runStop != nil {
		imp.runStop()
		<-imp.runDone
	}
	if imp.w != nil {
		imp.w.Close()
	}
	if imp.ctx != nil {
		imp.ctx.Close()
	}
}

// Stats returns the importer's counters.
func (imp *Importer) Stats() ImporterStats {
	c := &imp.st
	st := ImporterStats{Session: imp.SessionID().String(), Mode: imp.acc.Mode.String(), BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(),
		Reads: c.reads.Load(), Writes: c.writes.Load(), Atomics: c.atomics.Load(), Revocations: c.revocations.Load(),
		Rotations: c.rotations.Load(), Errors: c.errors.Load()}
	var oldest time.Time
	for _, r := range imp.Regions() {
		st.Regions++
		r.mu.Lock()
		if r.cur != nil && (oldest.IsZero() || r.cur.g.Issued.Before(oldest)) {
			oldest = r.cur.g.Issued
		}
		r.mu.Unlock()
	}
	if !oldest.IsZero() {
		st.LeaseAge = time.Since(oldest)
	}
	return st
}

// sessionAttr is the "session" attribute of the importer's lines.
func (imp *Importer) sessionAttr() slog.Attr { return slog.String("session", imp.SessionID().String()) }
