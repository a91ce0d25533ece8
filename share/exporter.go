package share

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// amBind is the active message an importer sends on its data endpoint,
// with its session token as header, so the exporter knows whose it is.
const amBind ucp.AMID = 0x5e01

// Defaults of the exporter's options.
const (
	DefaultLease            = 10 * time.Minute
	DefaultAckTimeout       = 5 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
)

// ExporterOption configures NewExporter.
type ExporterOption func(*exporterOptions)

type exporterOptions struct {
	mode      Mode
	lease     time.Duration
	ack       time.Duration
	handshake time.Duration
	dataAddr  string
	config    [][2]string
	name      string
}

// WithMode chooses how memory is shared (default ModeAuto: ModeExport
// where a memory domain of this machine can export keys, ModeRkey
// otherwise; Exporter.Mode says which and why).
func WithMode(m Mode) ExporterOption { return func(o *exporterOptions) { o.mode = m } }

// WithLease sets how long a grant is valid (default DefaultLease): at its
// expiry the exporter revokes it, unless Rotate replaced it.
func WithLease(d time.Duration) ExporterOption { return func(o *exporterOptions) { o.lease = d } }

// WithAckTimeout bounds how long a revocation the exporter starts itself
// (lease expiry, the end of a rotation's grace, Close) waits for the
// importer's acknowledgement before it closes that importer's session by
// force (default DefaultAckTimeout). Revoke, Session.Revoke, Remove and
// Rotate take a ctx instead.
func WithAckTimeout(d time.Duration) ExporterOption { return func(o *exporterOptions) { o.ack = d } }

// WithHandshakeTimeout bounds a new session's hello and, in rkey mode, its
// data connection (default DefaultHandshakeTimeout).
func WithHandshakeTimeout(d time.Duration) ExporterOption {
	return func(o *exporterOptions) { o.handshake = d }
}

// WithDataAddr is where the UCX listener for rkey mode listens
// ("host:port"; default: the control listener's host, port 0).
func WithDataAddr(addr string) ExporterOption { return func(o *exporterOptions) { o.dataAddr = addr } }

// WithUCXConfig sets a UCX configuration value of the exporter's context
// (ucp.WithConfig), after the ones export mode applies itself.
func WithUCXConfig(name, value string) ExporterOption {
	return func(o *exporterOptions) { o.config = append(o.config, [2]string{name, value}) }
}

// WithExpvarName publishes the exporter's Stats through package expvar,
// as the key "exporter.<name>" of the map "ucxshare", until Close; a name
// another exporter holds makes NewExporter fail (ucs.ErrAlreadyExists).
func WithExpvarName(name string) ExporterOption { return func(o *exporterOptions) { o.name = name } }

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
// The exporter owns a UCX context and worker, which it progresses itself.
type Exporter struct {
	ctx    *ucp.Context
	w      *ucp.Worker
	sealer Sealer
	o      exporterOptions
	mode   Mode
	why    string
	id     [16]byte

	runStop context.CancelFunc
	runDone chan struct{}

	mu        sync.Mutex
	closed    bool
	regions   map[string]*region
	order     []string // region ids in the order added
	sessions  map[*Session]struct{}
	nextSess  uint64
	listeners map[net.Listener]struct{}
	data      *ucp.Listener
	binds     map[[16]byte]chan *ucp.Endpoint
	bound     map[*ucp.Endpoint]bool // data endpoints a session claimed
	pending   map[netip.Addr]int     // hosts with a session waiting for its data connection
	wg        sync.WaitGroup

	st exporterCounters
}

type region struct {
	id      string
	b       []byte
	prot    ucp.Prot
	removed bool
}

// NewExporter makes an exporter whose grants sealer seals.
func NewExporter(sealer Sealer, opts ...ExporterOption) (*Exporter, error) {
	const op = "share: new exporter"
	if sealer == nil {
		return nil, errs.New(op, ucs.ErrInvalidParam, "a Sealer is required (NewHMACSealer)")
	}
	o := exporterOptions{lease: DefaultLease, ack: DefaultAckTimeout, handshake: DefaultHandshakeTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.lease <= 0 || o.ack <= 0 || o.handshake <= 0 {
		return nil, errs.New(op, ucs.ErrInvalidParam, "lease, ack and handshake timeouts must be positive")
	}
	mode, why, err := chooseMode(o.mode)
	if err != nil {
		return nil, err
	}
	features := ucp.FeatureRMA | ucp.FeatureAM
	var copts []ucp.ContextOption
	for _, kv := range ExporterConfig {
		copts = append(copts, ucp.WithConfig(kv[0], kv[1]))
	}
	if mode == ModeExport {
		features |= ucp.FeatureExportedMemh
		for _, kv := range ExportModeConfig {
			copts = append(copts, ucp.WithConfig(kv[0], kv[1]))
		}
	}
	for _, kv := range o.config {
		copts = append(copts, ucp.WithConfig(kv[0], kv[1]))
	}
	copts = append(copts, ucp.WithFeatures(features), ucp.WithName("ucxshare-exporter"))
	uctx, err := ucp.NewContext(copts...)
	if err != nil {
		return nil, err
	}
	w, err := uctx.NewWorker()
	if err != nil {
		uctx.Close()
		return nil, err
	}
	e := &Exporter{ctx: uctx, w: w, sealer: sealer, o: o, mode: mode, why: why,
		regions: map[string]*region{}, sessions: map[*Session]struct{}{},
		listeners: map[net.Listener]struct{}{}, binds: map[[16]byte]chan *ucp.Endpoint{},
		bound: map[*ucp.Endpoint]bool{}, pending: map[netip.Addr]int{}}
	rand.Read(e.id[:])
	if err := w.SetAMHandler(amBind, e.onBind); err != nil {
		w.Close()
		uctx.Close()
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	e.runStop, e.runDone = stop, make(chan struct{})
	go func() { defer close(e.runDone); w.Run(runCtx) }()
	if o.name != "" {
		if err := publish("exporter."+o.name, e, func() any { return e.Stats() }); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
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

// Add shares b as the region id with every importer, present and future,
// with protection prot (ucp.ProtRemoteRead, ucp.ProtRemoteWrite or both).
// b must stay valid, and is not to be freed or reused, until Remove(id) or
// Close returned. Sessions open already get a grant for it at once.
//
// id is 1 to 255 bytes of UTF-8, b is not empty, and at most MaxRegions
// are shared at once: otherwise the error wraps ucs.ErrInvalidParam,
// ucs.ErrAlreadyExists (id is shared already), ucs.ErrExceedsLimit, or
// ucs.ErrClosed after Close. A removed id may be added again; importers
// then see a new Region under it, the removed one staying revoked.
func (e *Exporter) Add(id string, b []byte, prot ucp.Prot) error {
	const op = "share: add region"
	if err := checkRegionID(op, id); err != nil {
		return &ucs.Error{Op: op, Err: ucs.ErrInvalidParam, Reason: err.(*ucs.Error).Reason}
	}
	if len(b) == 0 {
		return errs.New(op, ucs.ErrInvalidParam, "region %q is empty", id)
	}
	if prot&^(ucp.ProtRemoteRead|ucp.ProtRemoteWrite) != 0 || prot == 0 {
		return errs.New(op, ucs.ErrInvalidParam, "protection %#x: give ucp.ProtRemoteRead, ucp.ProtRemoteWrite or both", uint(prot))
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
	r := &region{id: id, b: b, prot: prot | ucp.ProtLocalRead | ucp.ProtLocalWrite}
	e.regions[id] = r
	e.order = append(e.order, id)
	sessions := e.sessionList()
	e.mu.Unlock()
	e.st.regions.Add(1)
	for _, s := range sessions {
		s.grantNew(r)
	}
	return nil
}

// Remove stops sharing the region id (an unknown id is an error wrapping
// ucs.ErrNoElem): every importer's grant for it is
// revoked and waited for. It returns once no importer can reach the
// region's memory: each acknowledged, failed, or (when ctx ended first)
// had its session closed by force; the error then says how many.
func (e *Exporter) Remove(ctx context.Context, id string) error {
	e.mu.Lock()
	r := e.regions[id]
	if r == nil {
		e.mu.Unlock()
		return errs.New("share: remove region", ucs.ErrNoElem, "no region %q", id)
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
	return revokeAll(ctx, "share: remove region", sessions, func(s *Session) []*generation { return s.gensOf(id, 0) }, reasonRemoved)
}

// Rotate gives every importer of region id a grant on a fresh
// registration, lets the old one be used for grace (an importer
// acknowledges it as soon as it moved over), then revokes what is left of
// the old one. It returns once every old registration is unmapped; when
// ctx ends first the sessions still holding one are closed by force.
func (e *Exporter) Rotate(ctx context.Context, id string, grace time.Duration) error {
	const op = "share: rotate"
	e.mu.Lock()
	r := e.regions[id]
	sessions := e.sessionList()
	e.mu.Unlock()
	if r == nil {
		return errs.New(op, ucs.ErrNoElem, "no region %q", id)
	}
	old := map[*Session][]*generation{}
	for _, s := range sessions {
		gens := s.gensOf(id, 0)
		if len(gens) == 0 {
			continue
		}
		if err := s.grantNew(r); err != nil {
			continue // the session ended: its registrations are unmapped
		}
		old[s] = gens
	}
	e.st.rotations.Add(1)
	t := time.NewTimer(grace)
	defer t.Stop()
	for _, gens := range old {
		for _, g := range gens {
			select {
			case <-g.gone:
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	list := make([]*Session, 0, len(old))
	for s := range old {
		list = append(list, s)
	}
	return revokeAll(ctx, op, list, func(s *Session) []*generation { return old[s] }, reasonRotated)
}

// Revoke revokes every importer: each gets a revocation for all it holds,
// and its session ends once it acknowledged. It returns once no importer
// can reach any region: when ctx ends first, the sessions that did not
// acknowledge are closed by force (the error says how many). Importers
// may open new sessions afterwards.
func (e *Exporter) Revoke(ctx context.Context) error {
	e.mu.Lock()
	sessions := e.sessionList()
	e.mu.Unlock()
	err := revokeAll(ctx, "share: revoke", sessions, func(s *Session) []*generation { return s.gensOf("", 0) }, reasonRevoke)
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
	return err
}

// revokeAll revokes the generations pick returns in each session and
// waits; at ctx's end the sessions left are closed by force.
func revokeAll(ctx context.Context, op string, sessions []*Session, pick func(*Session) []*generation, reason uint8) error {
	var pending []*generation
	for _, s := range sessions {
		for _, g := range pick(s) {
			if s.revokeGen(g, reason) {
				pending = append(pending, g)
			}
		}
	}
	forced := map[*Session]bool{}
	for _, g := range pending {
		select {
		case <-g.gone:
			continue
		case <-ctx.Done():
		}
		if !forced[g.s] {
			forced[g.s] = true
			g.s.end(&ucs.Error{Op: op, Err: ucs.ErrTimedOut, Reason: "no acknowledgement before the revocation's deadline"}, false)
		}
		<-g.gone
	}
	if len(forced) > 0 {
		return &ucs.Error{Op: op, Err: ucs.ErrTimedOut, Wrapped: ctx.Err(),
			Reason: fmt.Sprintf("%d importer(s) did not acknowledge in time; their sessions were closed by force and their registrations unmapped after", len(forced))}
	}
	return nil
}

// Serve accepts sessions on l until l is closed or the exporter is: the
// control connection of each importer (a TCP listener, or TLS or a Unix
// socket: any net.Listener). It returns the error that ended l's Accept,
// or nil once Close closed l; called after Close, it closes l and returns
// an error wrapping ucs.ErrClosed. In rkey mode the first Serve also
// starts the UCX listener importers connect to for data (WithDataAddr).
func (e *Exporter) Serve(l net.Listener) error {
	const op = "share: serve"
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		l.Close()
		return errs.New(op, ucs.ErrClosed, "the exporter is closed")
	}
	if e.mode == ModeRkey && e.data == nil {
		addr := e.o.dataAddr
		if addr == "" {
			addr = "0.0.0.0:0"
			if ap, err := netip.ParseAddrPort(l.Addr().String()); err == nil && !ap.Addr().IsUnspecified() {
				addr = netip.AddrPortFrom(ap.Addr().Unmap(), 0).String()
			}
		}
		dl, err := e.w.Listen(addr)
		if err != nil {
			e.mu.Unlock()
			l.Close()
			return err
		}
		e.data = dl
		e.wg.Add(1)
		go e.acceptData(dl)
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
			c.Close()
			continue
		}
		go s.serve()
	}
}

// acceptData accepts the importers' UCX connections (rkey mode), only from
// a host with a session in its handshake; each is bound to its session by
// the token it sends first, or closed when none claims it in time.
func (e *Exporter) acceptData(l *ucp.Listener) {
	defer e.wg.Done()
	for {
		cr, err := l.AcceptRequest(context.Background())
		if err != nil {
			return
		}
		e.mu.Lock()
		ok := e.pending[cr.ClientAddr().Addr().Unmap()] > 0
		e.mu.Unlock()
		if !ok {
			cr.Reject()
			continue
		}
		ep, err := cr.Accept()
		if err != nil {
			continue
		}
		go func() {
			select {
			case <-time.After(e.o.handshake):
				if !e.claimed(ep) {
					ep.Close(context.Background(), ucp.CloseForce)
				}
			case <-e.runDone:
			}
		}()
	}
}

// onBind runs in the worker's progress: it only hands the endpoint to the
// session waiting for the token (a buffered channel, never blocking).
func (e *Exporter) onBind(m *ucp.AMMessage) {
	var tok [16]byte
	if len(m.Header) != len(tok) || m.Reply() == nil {
		return
	}
	copy(tok[:], m.Header)
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch := e.binds[tok]; ch != nil {
		delete(e.binds, tok)
		e.bound[m.Reply()] = true
		ch <- m.Reply()
	}
}

func (e *Exporter) claimed(ep *ucp.Endpoint) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bound[ep]
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
// not acknowledge are closed by force), stops serving, unmaps every
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
	err := e.Revoke(ctx)
	cancel()
	e.mu.Lock()
	data := e.data
	e.mu.Unlock()
	if data != nil {
		data.Close()
	}
	e.wg.Wait()
	e.mu.Lock()
	left := e.sessionsWhere(true) // sessions that began during the revoke
	e.mu.Unlock()
	for _, s := range left {
		s.end(&ucs.Error{Op: "share: close", Err: ucs.ErrClosed, Reason: "the exporter closed"}, false)
	}
	e.runStop()
	<-e.runDone
	e.w.Close()
	e.ctx.Close()
	if e.o.name != "" {
		unpublish("exporter."+e.o.name, e)
	}
	return err
}

func (e *Exporter) newSession(c net.Conn) *Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.nextSess++
	s := &Session{e: e, id: e.nextSess, conn: c, gens: map[string][]*generation{}, done: make(chan struct{}), started: time.Now()}
	rand.Read(s.token[:])
	e.sessions[s] = struct{}{}
	e.st.served.Add(1)
	return s
}

// String names the session for logs: its number and the importer's
// address.
func (s *Session) String() string {
	return "session " + strconv.FormatUint(s.id, 10) + " from " + s.conn.RemoteAddr().String()
}
