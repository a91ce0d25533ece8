package share

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/ucxgo/ucx/internal/datapath"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// amBind is the active message an importer sends on its data endpoint,
// with its session token as header, so that its session's data-path
// process knows the endpoint is the importer's.
const amBind ucp.AMID = 0x5e01

// amAtomic is the active message of an atomic's request between the data
// paths, and amAtomic+1 its answer's (docs/share-protocol.md).
const amAtomic ucp.AMID = 0x5e02

// Defaults of the exporter's options.
const (
	DefaultLease            = 10 * time.Minute
	DefaultAckTimeout       = 5 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
)

type exporterOptions struct {
	mode      Mode
	lease     time.Duration
	ack       time.Duration
	handshake time.Duration
	hello     time.Duration
	limits    Limits
	dialed    []string
	config    [][2]string
	name      string
	events    chan<- Event
	log       *slog.Logger
}

// WithMode chooses how memory is shared (default ModeAuto: ModeExport
// where a memory domain of this machine can export keys, ModeRkey
// otherwise; Exporter.Mode says which and why).
func WithMode(m Mode) ExporterOption { return exporterOption(func(o *exporterOptions) { o.mode = m }) }

// WithLease sets how long a grant is valid (default DefaultLease): at its
// expiry the exporter revokes it, unless Rotate replaced it.
func WithLease(d time.Duration) ExporterOption {
	return exporterOption(func(o *exporterOptions) { o.lease = d })
}

// WithAckTimeout bounds how long a revocation the exporter starts itself
// (lease expiry, the end of a rotation's grace, Close) waits for the
// importer's acknowledgement before it closes that importer's session by
// force (default DefaultAckTimeout). Revoke, Session.Revoke, Remove and
// Rotate take a ctx instead.
func WithAckTimeout(d time.Duration) ExporterOption {
	return exporterOption(func(o *exporterOptions) { o.ack = d })
}

// Limits bounds what a party that has not proved the secret, and each
// importer host, can hold of an exporter. A zero field takes its default
// (DefaultLimits).
type Limits struct {
	// Handshakes is how many connections may be in their handshake at
	// once; Serve closes the others as it accepts them, unanswered.
	Handshakes int
	// HandshakesPerHost is how many of those may come from one source
	// address (a Unix socket's connections are one source).
	HandshakesPerHost int
	// Hello bounds the time from the accept to the importer's hello (a
	// TLS handshake included); the rest of the handshake is bounded by
	// WithHandshakeTimeout.
	Hello time.Duration
	// SessionsPerHost is how many sessions whose importer proved the
	// secret may be open at once from one importer host: the next is
	// refused with ErrRefused. Each holds a registration per region and,
	// in rkey mode, a data-path process.
	//
	// A host, for these limits, is a source address: an IPv4 address, an
	// IPv6 /64 prefix, and all Unix-socket connections together.
	// Importers behind one address translation are one host.
	SessionsPerHost int
}

// DefaultLimits are the limits an exporter applies unless WithLimits
// says otherwise.
var DefaultLimits = Limits{Handshakes: 64, HandshakesPerHost: 8, Hello: 2 * time.Second, SessionsPerHost: 16}

// WithLimits sets the exporter's limits on unauthenticated connections
// and on each importer host's sessions (docs/security.md says what a
// flood holds under the defaults).
func WithLimits(l Limits) ExporterOption {
	return exporterOption(func(o *exporterOptions) { o.limits = l })
}

// WithDialAddresses names addresses importers dial that reach this
// exporter through an address translation (a port forward, a load
// balancer), each an IP address and port ("192.0.2.7:7000", no host
// names: importers name the address they connected to) or a Unix
// socket's absolute path. An importer's proof covers the address it
// dialed; the exporter accepts the address its side of the connection
// has, and these. Anything else is refused: a relay between the importer
// and the exporter is dialed at its own address.
//
// In rkey mode the importer's data path connects to the control
// connection's remote address at the port of the exporter's data path,
// which listens for the control connection's remote address only: a
// translation must carry those too, so rkey mode through a NAT or a load
// balancer does not work.
func WithDialAddresses(addrs ...string) ExporterOption {
	return exporterOption(func(o *exporterOptions) { o.dialed = append(o.dialed, addrs...) })
}

// ExportModeConfig is the UCX configuration export mode applies to the
// contexts of both sides, before WithUCXConfig values: the shared-memory
// transports and tcp's native put off, as DOCA's UROM sample does for
// exported keys, so that RMA lanes are chosen among the transports that
// can use an imported memory handle (docs/revocation.md).
var ExportModeConfig = [][2]string{{"TLS", "^sm"}, {"TCP_PUT_ENABLE", "n"}}

// ExporterConfig is the UCX configuration every exporter's context gets,
// before WithUCXConfig values: UCX's registration cache off, so that each
// grant is a registration of its own (with the cache on, every
// registration of a range shares one memory region and one key on RDMA
// hardware, and unmapping one revokes nothing; docs/revocation.md).
var ExporterConfig = [][2]string{{"RCACHE_ENABLE", "n"}}

// Exporter shares regions of this process's memory with importers: each
// importer that opens a session (Dial) gets a sealed grant per region, on
// a registration of its own, and keeps access until its lease ends, the
// exporter revokes it, or it closes. A region's memory may be reused or
// freed once Remove (or Close) returned: by then no importer can reach it.
//
// No UCX worker runs in the exporter's process, so no UCX peer reaches its
// memory. In export mode it holds a UCX context only (registration and
// export need no worker). In rkey mode each session's data path is a
// process of its own (this binary, re-executed), which maps only the
// regions granted to that importer, read-only where the grant is, and
// unmaps a region when its grant is revoked; it ends with its session.
type Exporter struct {
	lg     *logger
	ctx    *ucp.Context // export mode only
	sealer Sealer
	o      exporterOptions
	mode   Mode
	why    string
	id     [16]byte

	mu        sync.Mutex
	closed    bool
	regions   map[string]*region
	order     []string // region ids in the order added
	sessions  map[*Session]struct{}
	nextSess  uint64
	shaking   int                // connections in their handshake
	shakingBy map[netip.Addr]int // of which from each source address
	listeners map[net.Listener]struct{}
	wg        sync.WaitGroup

	st exporterCounters
}

type region struct {
	id      string
	m       *Memory
	f       *datapath.Memfd
	prot    ucp.Prot
	removed bool           // under the exporter's lock; no generation starts after
	live    sync.WaitGroup // its generations not yet unmapped
}

// NewExporter makes an exporter whose grants sealer seals.
func NewExporter(sealer Sealer, opts ...ExporterOption) (*Exporter, error) {
	const op = "share: new exporter"
	if sealer == nil {
		return nil, errs.New(op, ucs.ErrInvalidParam, "a Sealer is required (NewHMACSealer)")
	}
	o := exporterOptions{lease: DefaultLease, ack: DefaultAckTimeout, handshake: DefaultHandshakeTimeout}
	for _, opt := range opts {
		opt.applyExporter(&o)
	}
	if o.lease <= 0 || o.ack <= 0 || o.handshake <= 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "lease, ack and handshake timeouts must be positive")
	}
	l, d := &o.limits, DefaultLimits
	if l.Handshakes < 0 || l.HandshakesPerHost < 0 || l.Hello < 0 || l.SessionsPerHost < 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "limits cannot be negative (zero takes the default)")
	}
	l.Handshakes = cmp.Or(l.Handshakes, d.Handshakes)
	l.HandshakesPerHost = cmp.Or(l.HandshakesPerHost, d.HandshakesPerHost)
	l.Hello = cmp.Or(l.Hello, d.Hello)
	l.SessionsPerHost = cmp.Or(l.SessionsPerHost, d.SessionsPerHost)
	for _, a := range o.dialed {
		ap, err := netip.ParseAddrPort(a)
		switch {
		case len(a) == 0 || len(a) > maxDialed:
			return nil, errs.New(op, ucs.ErrInvalidParam, "a dial address of %d bytes (1 to %d)", len(a), maxDialed)
		case err != nil && !strings.HasPrefix(a, "/"):
			return nil, errs.New(op, ucs.ErrInvalidParam, "dial address %q is neither an IP address and port (importers name what they dialed as one: no host names) nor a Unix socket's absolute path", a)
		case err == nil && (ap.Addr().IsUnspecified() || ap.Port() == 0):
			return nil, errs.New(op, ucs.ErrInvalidParam, "dial address %q: an importer dials a specific address and port", a)
		}
	}
	mode, why, err := chooseMode(o.mode)
	if err != nil {
		return nil, err
	}
	e := &Exporter{lg: newLogger(o.log), sealer: sealer, o: o, mode: mode, why: why,
		regions: map[string]*region{}, sessions: map[*Session]struct{}{}, shakingBy: map[netip.Addr]int{},
		listeners: map[net.Listener]struct{}{}}
	rand.Read(e.id[:])
	if mode == ModeExport {
		// Registration and export need a context, no worker: nothing of
		// UCX listens in this process.
		copts := []ucp.ContextOption{ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureExportedMemh), ucp.WithName("ucxshare-exporter")}
		for _, kv := range e.ucxConfig() {
			copts = append(copts, ucp.WithConfig(kv[0], kv[1]))
		}
		uctx, err := ucp.NewContext(copts...)
		if err != nil {
			return nil, err
		}
		e.ctx = uctx
	}
	if o.name != "" {
		if err := publish("exporter."+o.name, e, func() any { return e.Stats() }); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// ucxConfig is the UCX configuration of the exporter's contexts, in order:
// ExporterConfig, ExportModeConfig in export mode, then WithUCXConfig's.
func (e *Exporter) ucxConfig() [][2]string {
	kv := slices.Clone(ExporterConfig)
	if e.mode == ModeExport {
		kv = append(kv, ExportModeConfig...)
	}
	return append(kv, e.o.config...)
}

// chooseMode resolves ModeAuto and says why.
func chooseMode(want Mode) (Mode, string, error) {
	const op = "share: choose mode"
	err := uct.HaveExportedMkey()
	switch want {
	case ModeRkey:
		return ModeRkey, "rkey mode requested", nil
	case ModeExport, ModeAuto:
		if err == nil {
			return ModeExport, "a memory domain here can export memory keys", nil
		}
		if want == ModeExport || !errors.Is(err, ucs.ErrUnsupported) {
			return 0, "", &ucs.Error{Op: op, Err: ucs.ErrUnsupported, Reason: "export mode unavailable", Wrapped: err}
		}
		return ModeRkey, "no memory domain here can export memory keys (uct.Probe, or the doctor, says why for each), so rkey mode", nil
	}
	return 0, "", errs.New(op, ucs.ErrInvalidParam, "unknown mode %d", want)
}

// Mode is the mode the exporter runs in, and why.
func (e *Exporter) Mode() (Mode, string) { return e.mode, e.why }

// Access is what importers may do with a region: ReadOnly, WriteOnly or
// ReadWrite. ReadOnly holds against a hostile importer in every mode (the
// memory it reaches is mapped read-only, or its key refuses writes in
// hardware). WriteOnly holds against the importer's library only: a
// memory page cannot be writable and unreadable, and UCX's RMA over tcp
// and shared memory checks no key, so in rkey mode a hostile importer
// holding a write-only grant can read the region (docs/security.md).
type Access uint8

const (
	ReadOnly  Access = 1 // ReadAt (and the offload calls that read the region)
	WriteOnly Access = 2 // WriteAt (and the offload calls that write it)
	ReadWrite        = ReadOnly | WriteOnly
)

func (a Access) String() string {
	switch a {
	case ReadOnly:
		return "read-only"
	case WriteOnly:
		return "write-only"
	case ReadWrite:
		return "read-write"
	}
	return fmt.Sprintf("access(%d)", uint8(a))
}

// prot is a's UCX protection on the exporter's side.
func (a Access) prot() ucp.Prot {
	p := ucp.ProtLocalRead | ucp.ProtLocalWrite
	if a&ReadOnly != 0 {
		p |= ucp.ProtRemoteRead
	}
	if a&WriteOnly != 0 {
		p |= ucp.ProtRemoteWrite
	}
	return p
}

// accessOf is the Access a grant's protection gives.
func accessOf(p ucp.Prot) Access {
	var a Access
	if p&ucp.ProtRemoteRead != 0 {
		a |= ReadOnly
	}
	if p&ucp.ProtRemoteWrite != 0 {
		a |= WriteOnly
	}
	return a
}

// Add shares m (all of m.Bytes()) as the region id with every importer,
// present and future, with access a (ReadOnly, WriteOnly or ReadWrite). m
// cannot be closed until Remove(id) or Close returned (Memory.Close is
// refused while it is shared); its bytes may be reused then: no importer
// can reach them.
//
// Add returns once every session open at the call has been sent its grant
// (to all of them at once: a slow importer delays no other), or once ctx
// ends: the region is shared all the same, and a grant not sent by then
// follows when that importer's connection drains (one that does not drain
// within the ack timeout, WithAckTimeout, ends its session). A ctx ended
// before the call shares nothing: the error wraps ucs.ErrCanceled or
// ucs.ErrTimedOut.
//
// id is 1 to 255 bytes of UTF-8, m is open, and at most MaxRegions are
// shared at once: otherwise the error wraps ucs.ErrInvalidParam,
// ucs.ErrAlreadyExists (id is shared already), ucs.ErrExceedsLimit, or
// ucs.ErrClosed after Close. A removed id may be added again; importers
// then see a new Region under it, the removed one staying revoked. One
// Memory may be shared under several ids.
func (e *Exporter) Add(ctx context.Context, id string, m *Memory, a Access) error {
	const op = "share: add region"
	if err := checkRegionID(op, id); err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrInvalidParam, Reason: err.(*ucs.Error).Reason}
	}
	if m == nil {
		return errs.New(op, ucs.ErrInvalidParam, "region %q: no Memory (NewMemory)", id)
	}
	if a != ReadOnly && a != WriteOnly && a != ReadWrite {
		return errs.New(op, ucs.ErrInvalidParam, "access %d: give share.ReadOnly, share.WriteOnly or share.ReadWrite", uint8(a))
	}
	if err := ctxEnded(op, ctx); err != nil {
		return err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errs.New(op, ucs.ErrClosed, "the exporter is closed")
	}
	if _, ok := e.regions[id]; ok {
		e.mu.Unlock()
		return errs.New(op, ucs.ErrAlreadyExists, "region %q is shared already", id)
	}
	if len(e.regions) >= MaxRegions {
		e.mu.Unlock()
		return errs.New(op, ucs.ErrExceedsLimit, "%d regions are shared already (MaxRegions)", MaxRegions)
	}
	f, ok := m.hold()
	if !ok {
		e.mu.Unlock()
		return errs.New(op, ucs.ErrInvalidParam, "region %q: the Memory is closed", id)
	}
	r := &region{id: id, m: m, f: f, prot: a.prot()}
	e.regions[id] = r
	e.order = append(e.order, id)
	sessions := e.sessionList()
	e.mu.Unlock()
	e.st.regions.Add(1)
	grantAll(ctx, sessions, r)
	return nil
}

// grantAll grants r to each of sessions at once (a slow importer delays no
// other) and returns those whose grant was sent, once every grant was sent
// or ctx ended. A grant not sent by then goes on in the background: it
// reaches its importer when its connection drains, and a connection that
// does not drain within the ack timeout ends its session.
func grantAll(ctx context.Context, sessions []*Session, r *region) (granted []*Session) {
	type result struct {
		s  *Session
		ok bool
	}
	results := make(chan result, len(sessions)) // never blocks a grant left behind
	for _, s := range sessions {
		go func() { results <- result{s, s.grantNew(r) == nil} }()
	}
	for range sessions {
		select {
		case res := <-results:
			if res.ok {
				granted = append(granted, res.s)
			}
		case <-ctx.Done():
			return granted
		}
	}
	return granted
}

// ctxEnded is the error of a call whose ctx ended before it began (nil
// while ctx is live): such a call does nothing.
func ctxEnded(op string, ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return errs.Ctx(op, ctx.Err(), "the call's ctx had ended: nothing was done")
}

// Remove stops sharing the region id (an unknown id is an error wrapping
// ucs.ErrNoElem): every importer's grant for it is revoked and waited for.
// It returns once no importer can reach the region's memory, saying which
// sessions acknowledged; when ctx ends first, the grants not acknowledged
// are unmapped without the acknowledgement (those importers' sessions go
// on, without the region: a late access of theirs fails), the Revocation
// names them as Forced and the error wraps ucs.ErrTimedOut
// (ucs.ErrCanceled when ctx was canceled).
func (e *Exporter) Remove(ctx context.Context, id string) (Revocation, error) {
	e.mu.Lock()
	r := e.regions[id]
	if r == nil {
		e.mu.Unlock()
		return Revocation{}, errs.New("share: remove region", ucs.ErrNoElem, "no region %q", id)
	}
	r.removed = true
	delete(e.regions, id)
	for i, x := range e.order {
		if x == id {
			e.order = append(e.order[:i:i], e.order[i+1:]...)
			break
		}
	}
	sessions := e.sessionList()
	e.mu.Unlock()
	e.st.regions.Add(-1)
	rev, err := revokeAll(ctx, "share: remove region", sessions, func(s *Session) []*generation { return s.gensOf(id, 0) }, reasonRemoved, (*Session).forceUnmap)
	r.live.Wait() // and the grants that were being made
	r.m.release()
	return rev, err
}

// Rotate gives every importer of region id a grant on a fresh
// registration (to all of them at once: a slow importer delays no other),
// lets the old one be used for grace (an importer acknowledges it as soon
// as it moved over), then revokes what is left of the old one. It returns
// once every old registration is unmapped; when ctx ends first, the old
// registrations not acknowledged are unmapped without the
// acknowledgement, as Remove does (a new grant not sent by then follows
// as Add's do). A ctx ended before the call rotates nothing: the error
// wraps ucs.ErrCanceled or ucs.ErrTimedOut.
func (e *Exporter) Rotate(ctx context.Context, id string, grace time.Duration) (Revocation, error) {
	const op = "share: rotate"
	if err := ctxEnded(op, ctx); err != nil {
		return Revocation{}, err
	}
	e.mu.Lock()
	r := e.regions[id]
	sessions := e.sessionList()
	e.mu.Unlock()
	if r == nil {
		return Revocation{}, errs.New(op, ucs.ErrNoElem, "no region %q", id)
	}
	held := map[*Session][]*generation{}
	var holders []*Session
	for _, s := range sessions {
		if gens := s.gensOf(id, 0); len(gens) > 0 {
			held[s] = gens
			holders = append(holders, s)
		}
	}
	grantAll(ctx, holders, r)
	old := held // a session whose new grant failed ended: its old registrations are unmapped, and it is named as Ended
	e.st.rotations.Add(1)
	e.lg.log(slog.LevelInfo, "share: rotation", slog.String("region", id), slog.Int("sessions", len(old)), slog.Duration("grace", grace))
	graceCtx, cancel := context.WithTimeout(ctx, grace) // over for every generation at once
	defer cancel()
	for _, gens := range old {
		for _, g := range gens {
			select {
			case <-g.gone:
			case <-graceCtx.Done():
			}
		}
	}
	list := make([]*Session, 0, len(old))
	for s := range old {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	return revokeAll(ctx, op, list, func(s *Session) []*generation { return old[s] }, reasonRotated, (*Session).forceUnmap)
}

// Revoke revokes every importer: each gets a revocation for all it holds,
// and its session ends once it acknowledged. It returns once no importer
// can reach any region, saying which sessions acknowledged: when ctx ends
// first, the sessions that did not are closed by force, named as Forced,
// and the error wraps ucs.ErrTimedOut (ucs.ErrCanceled when ctx was
// canceled). Importers may open new sessions afterwards.
func (e *Exporter) Revoke(ctx context.Context) (Revocation, error) {
	e.mu.Lock()
	sessions := e.sessionList()
	e.mu.Unlock()
	rev, err := revokeAll(ctx, "share: revoke", sessions, func(s *Session) []*generation { return s.gensOf("", 0) }, reasonRevoke, endByForce("share: revoke"))
	for _, s := range sessions {
		s.end(nil, true)
	}
	e.mu.Lock()
	opening := e.sessionsWhere(true) // in their handshake: they hold nothing yet
	e.mu.Unlock()
	for _, s := range opening {
		if !slices.Contains(sessions, s) {
			s.end(&ucs.Error{Op: "share: revoke", Err: ErrRevoked, Reason: "the exporter revoked every importer during the handshake"}, false)
		}
	}
	return rev, err
}

// Revocation is how a revocation (Revoke, Session.Revoke, Remove, Rotate)
// ended in each session it reached, by session id.
type Revocation struct {
	// Acknowledged: the importer acknowledged everything revoked.
	Acknowledged []SessionID
	// Ended: the session ended (its connection failed, or it was closed)
	// before the importer acknowledged; its registrations are unmapped.
	Ended []SessionID
	// Forced: the importer had not acknowledged when the call's ctx
	// ended. Remove and Rotate unmapped those registrations without the
	// acknowledgement (the session goes on); Revoke closed the session.
	Forced []SessionID
}

// endByForce is revokeAll's force for a revocation of whole sessions:
// the session is closed by force.
func endByForce(op string) func(*Session, []*generation) {
	return func(s *Session, _ []*generation) {
		s.end(&ucs.Error{Op: op, Err: ucs.ErrTimedOut, Reason: "no acknowledgement before the revocation's deadline"}, false)
	}
}

// revokeAll revokes the generations pick returns in each session and
// waits for each to be unmapped; at ctx's end force takes the sessions
// left, with their generations not yet unmapped.
func revokeAll(ctx context.Context, op string, sessions []*Session, pick func(*Session) []*generation, reason uint8,
	force func(*Session, []*generation)) (Revocation, error) {
	type revoked struct {
		s    *Session
		gens []*generation
	}
	var all []revoked
	for _, s := range sessions {
		// Every generation picked counts, unmapped already or not: one the
		// importer acknowledged before the revocation (a rotation's
		// grace) names its session as acknowledged.
		gens := pick(s)
		for _, g := range gens {
			s.revokeGen(g, reason)
		}
		if len(gens) > 0 {
			all = append(all, revoked{s, gens})
		}
	}
	var rev Revocation
	for _, x := range all {
		forced := false
		for _, g := range x.gens {
			select {
			case <-g.gone: // unmapped already (once ctx ended, a select of both would pick either)
				continue
			default:
			}
			select {
			case <-g.gone:
				continue
			case <-ctx.Done():
			}
			if !forced {
				forced = true
				force(x.s, x.gens)
			}
			<-g.gone
		}
		switch id := x.s.ID(); {
		case forced:
			rev.Forced = append(rev.Forced, id)
		case slices.ContainsFunc(x.gens, func(g *generation) bool { return !g.acked }):
			rev.Ended = append(rev.Ended, id)
		default:
			rev.Acknowledged = append(rev.Acknowledged, id)
		}
	}
	if len(rev.Forced) > 0 {
		return rev, errs.Ctx(op, ctx.Err(), fmt.Sprintf("%d importer(s) did not acknowledge in time; what they held was unmapped without their acknowledgement", len(rev.Forced)))
	}
	return rev, nil
}

// Serve accepts sessions on l until l is closed or the exporter is: the
// control connection of each importer (a TCP listener, or TLS or a Unix
// socket: any net.Listener). It returns the error that ended l's Accept,
// or nil once Close closed l; called after Close, it closes l and returns
// an error wrapping ucs.ErrClosed. In rkey mode each session's data-path
// process listens on the control connection's local address, on a port of
// its own, for that session's importer only.
func (e *Exporter) Serve(l net.Listener) error {
	const op = "share: serve"
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		l.Close()
		return errs.New(op, ucs.ErrClosed, "the exporter is closed")
	}
	e.listeners[l] = struct{}{}
	e.wg.Add(1)
	e.mu.Unlock()
	defer e.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			e.mu.Lock()
			closed := e.closed
			delete(e.listeners, l)
			e.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		s := e.newSession(c)
		if s == nil {
			if !e.isClosed() {
				e.emit(Event{Kind: EventRefused, Remote: c.RemoteAddr().String(),
					Err: errs.New("share: serve", ErrRefused, "over a handshake limit (Limits): closed unanswered")})
			}
			c.Close() // over a limit, or closed: no goroutine, no byte read
			continue
		}
		go s.serve()
	}
}

// sessionList is the live sessions (past their handshake's snapshot of
// the regions), by number; all adds those in their handshake.
func (e *Exporter) sessionList() []*Session { return e.sessionsWhere(false) }

func (e *Exporter) sessionsWhere(all bool) []*Session {
	l := make([]*Session, 0, len(e.sessions))
	for s := range e.sessions {
		if all || s.live {
			l = append(l, s)
		}
	}
	sort.Slice(l, func(i, j int) bool { return l[i].id < l[j].id })
	return l
}

// Sessions are the importers' sessions open now.
func (e *Exporter) Sessions() []*Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sessionList()
}

// Close revokes every importer (bounded by WithAckTimeout; those that do
// not acknowledge are closed by force), stops serving (it closes the
// listeners given to Serve), unmaps every
// registration and closes the exporter's UCX context. The memory of every
// region may then be freed. Close is safe to call more than once and from
// several goroutines; the later calls return nil.
func (e *Exporter) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	ls := make([]net.Listener, 0, len(e.listeners))
	for l := range e.listeners {
		ls = append(ls, l)
	}
	e.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.o.ack)
	_, err := e.Revoke(ctx)
	cancel()
	e.wg.Wait()
	e.mu.Lock()
	left := e.sessionsWhere(true) // sessions that began during the revoke
	e.mu.Unlock()
	for _, s := range left {
		s.end(&ucs.Error{Op: "share: close", Err: ucs.ErrClosed, Reason: "the exporter closed"}, false)
	}
	e.mu.Lock()
	regions := make([]*region, 0, len(e.regions))
	for _, r := range e.regions {
		r.removed = true
		regions = append(regions, r)
	}
	e.regions, e.order = map[string]*region{}, nil
	e.mu.Unlock()
	for _, r := range regions {
		r.live.Wait()
		r.m.release()
	}
	if e.ctx != nil {
		e.ctx.Close()
	}
	if e.o.name != "" {
		unpublish("exporter."+e.o.name, e)
	}
	return err
}

// newSession files an accepted connection as a session in its
// handshake, or returns nil when the exporter is closed or the connection
// is over a handshake limit.
func (e *Exporter) newSession(c net.Conn) *Session {
	host := sourceOf(c)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	if e.shaking >= e.o.limits.Handshakes || e.shakingBy[host] >= e.o.limits.HandshakesPerHost {
		e.st.throttled.Add(1)
		return nil
	}
	e.shaking++
	e.shakingBy[host]++
	e.nextSess++
	s := &Session{e: e, id: e.nextSess, conn: c, host: host, shaking: true, gens: map[string][]*generation{}, done: make(chan struct{}), started: time.Now()}
	rand.Read(s.token[:])
	e.sessions[s] = struct{}{}
	e.st.served.Add(1)
	return s
}

// handshakeOver releases s's place among the connections in their
// handshake.
func (e *Exporter) handshakeOver(s *Session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !s.shaking {
		return
	}
	s.shaking = false
	e.shaking--
	if e.shakingBy[s.host]--; e.shakingBy[s.host] == 0 {
		delete(e.shakingBy, s.host)
	}
}

// admit counts s, whose importer proved the secret, against its host's
// sessions, or refuses it.
func (e *Exporter) admit(s *Session) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.ended {
		return &ucs.Error{Op: "share: session handshake", Err: ucs.ErrClosed, Reason: "the session ended"}
	}
	n := 0
	for o := range e.sessions {
		if o.authed && o.host == s.host {
			n++
		}
	}
	if n >= e.o.limits.SessionsPerHost {
		return &ucs.Error{Op: "share: session handshake", Err: ErrRefused,
			Reason: fmt.Sprintf("%d sessions from this importer's host are open (Limits.SessionsPerHost)", n)}
	}
	s.authed = true
	return nil
}

// sourceOf is a connection's source, the unit of the per-host limits:
// its IPv4 address, the /64 prefix of its IPv6 address (one host's or
// one network's: a host holds a /64 of addresses as easily as one), or
// the zero Addr for a Unix socket's or any without an IP address (one
// source for all of them).
func sourceOf(c net.Conn) netip.Addr {
	ap, err := netip.ParseAddrPort(addrString(c.RemoteAddr()))
	if err != nil {
		return netip.Addr{}
	}
	a := ap.Addr().Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// dialedHere says whether dialed, the address the importer says it
// dialed, reaches this exporter on s's connection.
func (s *Session) dialedHere(dialed string) bool {
	if sameAddress(dialed, s.conn.LocalAddr()) {
		return true
	}
	for _, a := range s.e.o.dialed {
		if a == dialed || sameAddress(dialed, stringAddr(a)) {
			return true
		}
	}
	return false
}

// stringAddr is a net.Addr that is a string.
type stringAddr string

func (a stringAddr) Network() string { return "" }
func (a stringAddr) String() string  { return string(a) }

// SessionID names one session, the same on both sides: the exporter's
// Session.ID and the importer's Importer.SessionID. It is chosen at random
// by the exporter for each connection, and says nothing secret.
type SessionID [16]byte

func (id SessionID) String() string { return hex.EncodeToString(id[:]) }

// ID is the session's id, which the importer's Importer.SessionID
// returns too.
func (s *Session) ID() SessionID { return SessionID(s.token) }

// String names the session for logs: its id and the importer's address.
func (s *Session) String() string {
	return "session " + s.ID().String() + " from " + s.conn.RemoteAddr().String()
}
