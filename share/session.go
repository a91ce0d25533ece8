package share

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/ucxgo/ucx/internal/datapath"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Session is one importer's session at the exporter: its control
// connection, its registrations (one per region and generation) and, in
// rkey mode, its data-path process. Revoking it does not disturb other
// importers: their registrations are their own.
type Session struct {
	e       *Exporter
	id      uint64
	conn    net.Conn
	token   [16]byte // the session's id, in its grants
	t3      [32]byte // the handshake's transcript, which the bind claim seals
	host    netip.Addr
	authed  bool // both proofs held: it counts against its host's sessions (under the exporter's lock)
	shaking bool // in its handshake: it counts against the handshake limits (under the exporter's lock)
	started time.Time
	dp      *datapath.Proc // rkey mode: the session's data-path process
	peerUCX ucs.Version

	wmu sync.Mutex // one frame at a time on conn

	mu      sync.Mutex
	gens    map[string][]*generation
	nextGen uint64
	ended   bool
	endErr  error
	// openedEvent: EventOpened was sent, so its end sends EventEnded (a
	// session ended in its handshake has EventRefused as its one event).
	openedEvent bool
	done        chan struct{}

	st sessionCounters

	live    bool // granted what is shared (under the exporter's lock)
	refused bool // a refusal was sent
}

// generation is one registration of a region for one session: in export
// mode a mapping of the exporter's context, in rkey mode one of the
// session's data-path process.
type generation struct {
	s        *Session
	r        *region
	region   string
	gen      uint64
	mem      *ucp.Mem // export mode
	issued   time.Time
	expires  time.Time
	revoking bool
	acked    bool // unmapped on the importer's acknowledgement
	lease    *time.Timer
	gone     chan struct{} // closed once unmapped
}

// Done is closed when the session has ended and its registrations are
// unmapped.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended: nil while it runs and after a clean end
// (the importer closed, or was revoked and acknowledged).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endErr
}

// Revoke revokes everything this importer holds and ends its session once
// it acknowledged; other importers are not disturbed. It returns once the
// importer cannot reach any region: when ctx ends first the session is
// closed by force, the Revocation says Forced, and the error wraps
// ucs.ErrTimedOut (ucs.ErrCanceled when ctx was canceled).
func (s *Session) Revoke(ctx context.Context) (Revocation, error) {
	rev, err := revokeAll(ctx, "share: revoke session", []*Session{s}, func(s *Session) []*generation { return s.gensOf("", 0) }, reasonRevoke, endByForce("share: revoke session"))
	s.end(nil, true)
	return rev, err
}

// forceUnmap unmaps those of gens the importer has not acknowledged,
// without its acknowledgement: the session goes on without them (the
// operating system, or the hardware key, refuses a late access, which
// ends that session at most).
func (s *Session) forceUnmap(gens []*generation) {
	for _, g := range gens {
		s.mu.Lock()
		mine := false
		gs := s.gens[g.region]
		for i, x := range gs {
			if x == g {
				s.gens[g.region] = append(gs[:i:i], gs[i+1:]...)
				mine = true
				break
			}
		}
		if len(s.gens[g.region]) == 0 {
			delete(s.gens, g.region)
		}
		s.mu.Unlock()
		if mine { // not claimed by an acknowledgement or the session's end
			s.e.st.forcedUnmaps.Add(1)
			s.e.lg.log(slog.LevelWarn, "share: unmapped without acknowledgement", s.sessionAttr(), s.remoteAttr(),
				slog.String("region", g.region), slog.Uint64("gen", g.gen))
			g.unmap()
		}
	}
}

// gensOf is the session's live generations of region (every region for
// ""), except gen skip.
func (s *Session) gensOf(region string, skip uint64) []*generation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*generation
	for id, gs := range s.gens {
		if region != "" && id != region {
			continue
		}
		for _, g := range gs {
			if g.gen != skip {
				out = append(out, g)
			}
		}
	}
	return out
}

func (s *Session) send(t frameType, p []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.conn.SetWriteDeadline(time.Now().Add(s.e.o.ack))
	return writeFrame(s.conn, t, p)
}

// refuse sends the session's one refusal.
func (s *Session) refuse(err error) {
	s.mu.Lock()
	first := !s.refused
	s.refused = true
	s.mu.Unlock()
	if first {
		s.send(frameRefuse, encodeRefuse(err))
	}
}

// serve runs the session: the handshake, the initial grants, then the
// importer's acknowledgements until the session ends.
func (s *Session) serve() {
	err := s.handshake()
	s.e.handshakeOver(s)
	if err != nil {
		s.e.st.refused.Add(1)
		s.event(EventRefused, "", err)
		s.end(err, false)
		return
	}
	s.mu.Lock()
	opened := !s.ended // not ended meanwhile (by the exporter's Close)
	s.openedEvent = opened
	s.mu.Unlock()
	if opened {
		s.event(EventOpened, "", nil)
	}
	if s.dp != nil {
		go func() {
			select {
			case <-s.dp.PeerFailed():
			case <-s.dp.Done():
				s.end(&ucs.Error{Op: "share: session", Err: ucs.ErrConnectionReset, Reason: "the session's data path ended", Wrapped: s.dp.Err()}, false)
				return
			case <-s.done:
				return
			}
			// An importer that closes cleanly says bye on the control
			// connection before it closes its endpoint, but the two travel
			// apart: give the bye a moment to arrive.
			t := time.NewTimer(time.Second)
			defer t.Stop()
			select {
			case <-t.C:
				s.end(&ucs.Error{Op: "share: session", Err: ucs.ErrEndpointTimeout, Reason: "the importer's endpoint failed"}, false)
			case <-s.done:
			}
		}()
	}
	for {
		t, p, err := readFrame(s.conn)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = &ucs.Error{Op: "share: session", Err: ucs.ErrConnectionReset, Reason: "the importer's control connection ended without a bye"}
			} else if errors.Is(err, net.ErrClosed) {
				err = nil // ended here
			}
			s.end(err, false)
			return
		}
		switch t {
		case frameAck:
			m, err := decodeAck(p)
			if err != nil {
				s.end(err, false)
				return
			}
			s.acked(m)
		case frameBye:
			// The importer drained, flushed and dropped everything.
			if len(p) != 0 {
				s.end(protoErr("share: session", "a bye with %d bytes", len(p)), false)
				return
			}
			s.end(nil, false)
			return
		case frameRefuse:
			cause, why := decodeRefuse(p)
			s.end(&ucs.Error{Op: "share: session", Err: cause, Reason: "the importer refused a grant: " + why}, false)
			return
		default:
			s.end(protoErr("share: session", "unexpected %s frame from the importer", t), false)
			return
		}
	}
}

func (s *Session) handshake() error {
	const op = "share: session handshake"
	e := s.e
	deadline := time.Now().Add(e.o.handshake)
	// The hello (and a TLS handshake before it) comes first and fast: a
	// connection that holds its place without one is cut at the hello's
	// deadline.
	helloBy := time.Now().Add(e.o.limits.Hello)
	if helloBy.After(deadline) {
		helloBy = deadline
	}
	s.conn.SetDeadline(helloBy)
	hctx, cancel := context.WithDeadline(context.Background(), helloBy)
	binding, err := channelBinding(hctx, s.conn)
	cancel()
	if err != nil {
		if errors.Is(err, ErrRefused) {
			s.refuse(err)
		}
		return err
	}
	t, p, err := readFrameMax(s.conn, maxHelloFrame)
	if err != nil {
		return err
	}
	if t != frameHelloImporter {
		return protoErr(op, "the first frame is a %s, not a hello", t)
	}
	h, err := decodeImporterHello(p)
	if err != nil {
		s.refuse(err)
		return err
	}
	if h.Proto != protoVersion {
		err := &ucs.Error{Op: op, Err: ErrRefused, Reason: fmt.Sprintf("the importer speaks protocol version %d, this exporter %d", h.Proto, protoVersion)}
		s.refuse(err)
		return err
	}
	// The importer's proof will cover the address it dialed: one this
	// connection does not reach the exporter at is a relay's, or an
	// address translation's the exporter was not told of.
	if h.TLS != (binding != nil) {
		err := &ucs.Error{Op: op, Err: ErrRefused, Reason: fmt.Sprintf("TLS on one side of the connection only (the importer's: %t, the exporter's: %t): "+
			"a TLS-terminating proxy between them, or a connection wrapped so that it is no *tls.Conn", h.TLS, binding != nil)}
		s.refuse(err)
		return err
	}
	if !s.dialedHere(h.Dialed) {
		err := &ucs.Error{Op: op, Err: ErrRefused, Reason: fmt.Sprintf("the importer dialed %q, which is not this exporter's address on this connection "+
			"(a relay between the two, or an address translation: WithDialAddresses names the addresses importers dial)", h.Dialed)}
		s.refuse(err)
		return err
	}
	// The exporter proves the secret first, over the importer's hello,
	// the connection's binding and its own nonce.
	var tr transcript
	var nonce [nonceSize]byte
	rand.Read(nonce[:])
	tr.first(p, binding, nonce)
	eh := exporterHello{Proto: protoVersion, Nonce: nonce}
	if eh.Proof, err = e.sealer.Seal(proofMessage(exporterProofLabel, tr.t1)); err != nil || len(eh.Proof) > maxSealed {
		err := &ucs.Error{Op: op, Err: ErrSeal, Reason: fmt.Sprintf("the Sealer failed, or made a proof over %d bytes", maxSealed), Wrapped: err}
		s.refuse(&ucs.Error{Op: op, Err: ErrRefused, Reason: "the exporter could not seal its proof"})
		return err
	}
	ehb := eh.encode()
	if err := s.send(frameHelloExporter, ehb); err != nil {
		return err
	}
	// The importer's proof comes as fast as its hello: until it holds,
	// the connection keeps its place among those in their handshake for
	// Limits.Hello at most.
	proofBy := time.Now().Add(e.o.limits.Hello)
	if proofBy.After(deadline) {
		proofBy = deadline
	}
	s.conn.SetDeadline(proofBy)
	t, p, err = readFrameMax(s.conn, maxProofFrame)
	if err != nil {
		return err
	}
	switch t {
	case frameProof:
	case frameRefuse:
		cause, why := decodeRefuse(p)
		return &ucs.Error{Op: op, Err: cause, Reason: "the importer refused: " + why}
	default:
		return protoErr(op, "expected the importer's proof, got a %s", t)
	}
	ip, err := decodeImporterProof(p)
	if err != nil {
		s.refuse(err)
		return err
	}
	tr.second(ehb, ip.params())
	if !checkSealed(e.sealer, ip.Proof, proofMessage(importerProofLabel, tr.t2)) {
		err := &ucs.Error{Op: op, Err: ErrSeal, Reason: "the importer's proof does not authenticate under this exporter's secret (the two sides hold different sealing secrets)"}
		s.refuse(err)
		return err
	}
	tr.third(ip.Proof)
	s.t3 = tr.t3
	s.conn.SetDeadline(deadline)
	// Both sides proved the secret: what is left is whether the pair can
	// work, and whether this importer's host may open one more session.
	s.peerUCX = ip.UCX
	local := ucs.LoadedVersion()
	if err = compatible(local, ip.UCX); err == nil {
		switch {
		case ip.Want != ModeAuto && ip.Want != e.mode:
			err = &ucs.Error{Op: op, Err: ErrRefused, Reason: "the importer requires " + ip.Want.String() + " mode; this exporter runs in " + e.mode.String() + " mode (" + e.why + ")"}
		case e.mode == ModeExport && !ip.CanImport:
			err = &ucs.Error{Op: op, Err: ErrRefused, Reason: "this exporter runs in export mode and the importer has no memory domain that can import exported keys"}
		default:
			err = e.admit(s)
		}
	}
	if err != nil {
		s.refuse(err)
		return err
	}
	// Only now does this importer get a data path: a process of its own,
	// listening for this importer's host only, which keeps the one
	// endpoint that sends this session's token.
	var port uint16
	if e.mode == ModeRkey {
		dctx, cancel := context.WithDeadline(context.Background(), deadline)
		dp, err := s.startDataPath(dctx)
		cancel()
		if err != nil {
			// The importer proved the secret: it hears why (a process
			// start's error names no secret).
			why := "the exporter could not start the session's data path: " + err.Error()
			s.refuse(&ucs.Error{Op: op, Err: ErrRefused, Reason: why})
			return err
		}
		s.mu.Lock()
		s.dp = dp
		ended := s.ended
		s.mu.Unlock()
		if ended {
			dp.Close()
			return &ucs.Error{Op: op, Err: ucs.ErrClosed, Reason: "the session ended"}
		}
		port = dp.Port()
	}
	acc := accepted{T3: s.t3, UCX: local, Mode: e.mode, Exporter: e.id, Session: s.token, Port: port}
	sealed, err := e.sealer.Seal(acc.encode())
	if err != nil {
		s.refuse(&ucs.Error{Op: op, Err: ErrRefused, Reason: "the exporter could not seal its answer"})
		return &ucs.Error{Op: op, Err: ErrSeal, Reason: "the Sealer failed", Wrapped: err}
	}
	if err := s.send(frameAccepted, sealed); err != nil {
		return err
	}
	if s.dp != nil {
		select {
		case <-s.dp.Bound():
		case <-s.dp.Done():
			return &ucs.Error{Op: op, Err: ucs.ErrConnectionReset, Reason: "the session's data path ended", Wrapped: s.dp.Err()}
		case <-time.After(time.Until(deadline)):
			err := &ucs.Error{Op: op, Err: ucs.ErrTimedOut, Reason: "the importer's UCX connection did not arrive"}
			s.refuse(err)
			return err
		}
		// The importer says which tcp connections with its host are its
		// data path's; the data path cuts any other (one made to UCX's
		// own tcp interface while it waited for the bind).
		t, p, err := readFrame(s.conn)
		if err != nil {
			return err
		}
		if t != frameDataPorts {
			return protoErr(op, "expected the importer's data ports, got a %s", t)
		}
		ports, err := decodeDataPorts(p)
		if err != nil {
			s.refuse(err)
			return err
		}
		kctx, cancel := context.WithDeadline(context.Background(), deadline)
		err = s.dp.Keep(kctx, ports)
		cancel()
		if err != nil {
			return &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "the session's data path did not keep its connections", Wrapped: err}
		}
	}
	// The regions shared now are granted here; from the same instant the
	// session is live, so a region added later is granted by Add, once.
	e.mu.Lock()
	regions := make([]*region, 0, len(e.order))
	for _, id := range e.order {
		regions = append(regions, e.regions[id])
	}
	s.live = true
	e.mu.Unlock()
	for _, r := range regions {
		if err := s.grantNew(r); err != nil && !errors.Is(err, ucs.ErrNoElem) { // removed meanwhile
			s.refuse(&ucs.Error{Op: "share: grant", Err: ErrRefused, Reason: "the exporter could not grant region " + r.id + ": " + err.Error()})
			return err
		}
	}
	if err := s.send(frameReady, nil); err != nil {
		return err
	}
	s.conn.SetDeadline(time.Time{})
	return nil
}

// grantNew registers r's memory afresh for this session and sends the
// grant for it. The generation is numbered, recorded and sent under the
// session's write lock, so that generations reach the importer in
// increasing order and a revocation never precedes its grant; a region
// Remove took away meanwhile is not granted.
func (s *Session) grantNew(r *region) error {
	const op = "share: grant"
	e := s.e
	e.mu.Lock()
	if r.removed {
		e.mu.Unlock()
		return &ucs.Error{Op: op, Err: ucs.ErrNoElem, Reason: "region " + r.id + " was removed"}
	}
	r.live.Add(1) // Done by the generation's unmap, or below
	e.mu.Unlock()
	s.mu.Lock()
	s.nextGen++
	gen := s.nextGen
	s.mu.Unlock()
	g := &generation{s: s, r: r, region: r.id, gen: gen, gone: make(chan struct{})}
	var (
		key  []byte
		addr uint64
		err  error
	)
	if e.mode == ModeExport {
		b := r.f.Bytes()
		if g.mem, err = e.ctx.RegisterPointer(unsafe.Pointer(unsafe.SliceData(b)), len(b), ucp.WithProt(r.prot)); err == nil {
			addr = g.mem.Address()
			if key, err = g.mem.Export(); err != nil {
				g.mem.Close()
			}
		}
	} else {
		addr, key, err = s.mapInDataPath(g)
	}
	if err != nil {
		r.live.Done()
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	e.mu.Lock()
	s.mu.Lock()
	switch {
	case s.ended:
		err = &ucs.Error{Op: op, Err: ucs.ErrClosed, Reason: "the session ended"}
	case r.removed:
		err = &ucs.Error{Op: op, Err: ucs.ErrNoElem, Reason: "region " + r.id + " was removed"}
	}
	if err != nil {
		s.mu.Unlock()
		e.mu.Unlock()
		g.unmap()
		return err
	}
	now := time.Now()
	g.issued, g.expires = now, now.Add(e.o.lease)
	s.gens[r.id] = append(s.gens[r.id], g)
	g.lease = time.AfterFunc(e.o.lease, func() { s.expire(g) })
	s.mu.Unlock()
	e.mu.Unlock()
	sealed, err := e.sealer.Seal((&grant{Format: grantFormat, UCX: ucs.LoadedVersion(), Mode: e.mode, Exporter: e.id,
		Session: s.token, Gen: g.gen, Prot: uint32(r.prot), Address: addr, Length: uint64(len(r.f.Bytes())),
		Issued: g.issued, Expires: g.expires, Region: r.id, Key: key}).encode())
	if err != nil {
		err = &ucs.Error{Op: op, Err: ErrSeal, Reason: "the Sealer failed", Wrapped: err}
	} else {
		s.conn.SetWriteDeadline(time.Now().Add(e.o.ack))
		err = writeFrame(s.conn, frameGrant, sealed)
	}
	if err != nil {
		go s.end(err, false) // unmaps g too
		return err
	}
	s.st.grants.Add(1)
	e.st.grants.Add(1)
	e.lg.log(slog.LevelInfo, "share: grant", s.sessionAttr(), s.remoteAttr(), slog.String("region", r.id), slog.Uint64("gen", g.gen),
		slog.String("access", accessOf(r.prot).String()), slog.Time("expires", g.expires))
	return nil
}

// revokeGen asks the importer to drop g; false if g is unmapped already.
func (s *Session) revokeGen(g *generation, reason uint8) bool {
	s.mu.Lock()
	select {
	case <-g.gone:
		s.mu.Unlock()
		return false
	default:
	}
	first := !g.revoking
	g.revoking = true
	s.mu.Unlock()
	if first {
		s.st.revocations.Add(1)
		s.e.st.revocations.Add(1)
		if reason == reasonExpired { // before the revoke: its acknowledgement comes after
			s.event(EventExpired, g.region, nil)
		}
		s.e.lg.log(slog.LevelInfo, "share: revoke", s.sessionAttr(), s.remoteAttr(), slog.String("region", g.region), slog.Uint64("gen", g.gen),
			slog.String("reason", reasonText(reason)))
		if err := s.send(frameRevoke, (&revokeMsg{Gen: g.gen, Reason: reason, Region: g.region}).encode()); err != nil {
			go s.end(err, false)
		}
	}
	return true
}

// expire revokes g at the end of its lease, and ends the session if the
// importer does not acknowledge within the ack timeout.
func (s *Session) expire(g *generation) {
	if !s.revokeGen(g, reasonExpired) {
		return
	}
	s.e.st.expired.Add(1)
	t := time.NewTimer(s.e.o.ack)
	defer t.Stop()
	select {
	case <-g.gone:
	case <-t.C:
		s.end(&ucs.Error{Op: "share: lease", Err: ucs.ErrTimedOut, Reason: "the importer did not acknowledge the expiry of its lease"}, false)
	}
}

// acked unmaps the generation the importer dropped.
func (s *Session) acked(m *ackMsg) {
	s.mu.Lock()
	var g *generation
	gs := s.gens[m.Region]
	for i, x := range gs {
		if x.gen == m.Gen {
			g = x
			s.gens[m.Region] = append(gs[:i:i], gs[i+1:]...)
			break
		}
	}
	if len(s.gens[m.Region]) == 0 {
		delete(s.gens, m.Region)
	}
	s.mu.Unlock()
	if g == nil {
		return // already unmapped (acknowledged twice, or after the end)
	}
	s.st.acks.Add(1)
	s.e.st.acks.Add(1)
	g.acked = true
	g.unmap()
	s.event(EventAcknowledged, m.Region, nil)
}

// unmap ends the generation's registration: in export mode the exporter
// deregisters it; in rkey mode the data-path process unmaps it (or, when
// it does not answer in time, is ended). Once gone is closed, the
// generation's memory is mapped nowhere but in the exporter.
func (g *generation) unmap() {
	if g.lease != nil {
		g.lease.Stop()
	}
	if g.mem != nil {
		g.mem.Close()
	} else if dp := g.s.dp; dp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), g.s.e.o.ack)
		if dp.Unmap(ctx, g.gen) != nil {
			dp.Close() // unmaps everything it mapped
		}
		cancel()
	}
	close(g.gone)
	g.r.live.Done()
}

// end ends the session once: its data-path process is ended first (rkey
// mode), so that nothing the importer started can reach a registration,
// then every registration is unmapped. graceful sends a bye first.
func (s *Session) end(err error, graceful bool) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.ended = true
	s.endErr = err
	opened := s.openedEvent
	var gens []*generation
	for _, gs := range s.gens {
		gens = append(gens, gs...)
	}
	s.gens = nil
	dp := s.dp
	s.mu.Unlock()
	e := s.e
	e.st.ended.Add(1)
	if err != nil {
		s.st.errors.Add(1)
		e.st.errors.Add(1)
	}
	if len(gens) > 0 && err != nil {
		e.st.forced.Add(1)
	}
	if graceful {
		s.send(frameBye, nil)
	} else if errors.Is(err, ErrProtocol) {
		s.refuse(err)
	}
	s.conn.Close()
	if dp != nil {
		// The process ends, and with it every mapping of the session and
		// the importer's endpoint: then the generations are gone.
		dp.Close()
	}
	for _, g := range gens {
		g.unmap()
	}
	// Listed (Sessions) until here: a session no longer listed reaches
	// nothing.
	e.mu.Lock()
	delete(e.sessions, s)
	e.mu.Unlock()
	if opened { // a session refused or ended in its handshake: EventRefused was its one event
		s.event(EventEnded, "", err)
	}
	close(s.done)
}
