package share

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/ucxgo/ucx/ucs"
)

// The handshake of protocol version 3 (docs/share-protocol.md, "The
// session"): each side sends a nonce; the exporter proves the secret
// first, over the importer's hello, its own nonce and the connection's
// channel binding; the importer proves it over all of that and its own
// parameters; the exporter's parameters (ids, release, mode, data port)
// come sealed after both proofs, and the bind claim seals the whole
// transcript. Every proof names its role, so one side's proof is never
// the other's.

// The handshake's frames are small: each step reads at most these many
// bytes (type and payload), checked from the frame's header.
const (
	maxHelloFrame    = 512  // importer's or exporter's hello
	maxProofFrame    = 2048 // the importer's proof frame
	maxAcceptedFrame = 2048 // the sealed accepted frame
	maxDialed        = 255  // the address the importer dialed, in bytes
	maxSealed        = 1024 // a sealed proof or accepted message, in bytes
	nonceSize        = 32
)

// importerHello opens a session: the importer's nonce, whether its side
// of the connection is TLS (its proofs then cover TLS keying material),
// and the address it dialed (its connection's remote address), nothing
// else.
type importerHello struct {
	Proto  uint16
	Nonce  [nonceSize]byte
	TLS    bool
	Dialed string
}

func (h *importerHello) encode() []byte {
	b := append([]byte(helloMagic), 0, 0)
	binary.LittleEndian.PutUint16(b[len(helloMagic):], h.Proto)
	b = append(b, h.Nonce[:]...)
	flags := byte(0)
	if h.TLS {
		flags = 1
	}
	b = append(b, flags, byte(len(h.Dialed)))
	return append(b, h.Dialed...)
}

// decodeImporterHello parses a hello. A hello of another version is
// returned with its version only, for its caller to refuse by version.
func decodeImporterHello(p []byte) (*importerHello, error) {
	const op = "share: importer hello"
	r := reader{b: p}
	if !bytes.Equal(r.take(len(helloMagic)), []byte(helloMagic)) {
		return nil, protoErr(op, "not a session of this protocol (bad magic)")
	}
	h := &importerHello{Proto: r.u16()}
	if !r.bad && h.Proto != protoVersion {
		return h, nil
	}
	copy(h.Nonce[:], r.take(nonceSize))
	flags := r.u8()
	h.Dialed = string(r.take(int(r.u8())))
	if err := r.done(op, "hello"); err != nil {
		return nil, err
	}
	if flags&^1 != 0 {
		return nil, protoErr(op, "unknown flags %#x", flags)
	}
	if h.Dialed == "" {
		return nil, protoErr(op, "no dialed address")
	}
	h.TLS = flags == 1
	return h, nil
}

// exporterHello answers it: the exporter's nonce and its proof.
type exporterHello struct {
	Proto uint16
	Nonce [nonceSize]byte
	Proof []byte // Seal("UCXPRF-E" ‖ t1)
}

func (h *exporterHello) encode() []byte {
	b := append([]byte(helloMagic), 0, 0)
	binary.LittleEndian.PutUint16(b[len(helloMagic):], h.Proto)
	b = append(b, h.Nonce[:]...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h.Proof)))
	return append(b, h.Proof...)
}

func decodeExporterHello(p []byte) (*exporterHello, error) {
	const op = "share: exporter hello"
	r := reader{b: p}
	if !bytes.Equal(r.take(len(helloMagic)), []byte(helloMagic)) {
		return nil, protoErr(op, "not a session of this protocol (bad magic)")
	}
	h := &exporterHello{Proto: r.u16()}
	if !r.bad && h.Proto != protoVersion {
		return h, nil
	}
	copy(h.Nonce[:], r.take(nonceSize))
	n := int(r.u16())
	if n > maxSealed {
		return nil, protoErr(op, "a proof of %d bytes (at most %d)", n, maxSealed)
	}
	h.Proof = bytes.Clone(r.take(n))
	if err := r.done(op, "hello"); err != nil {
		return nil, err
	}
	return h, nil
}

// importerProof is the importer's third frame: what the exporter needs
// to judge the pair (its UCX release, whether it can import exported
// keys, the mode it requires), then its proof over the transcript and
// those fields.
type importerProof struct {
	UCX       ucs.Version
	CanImport bool
	Want      Mode
	Proof     []byte // Seal("UCXPRF-I" ‖ t2)
}

// params is the part of the proof frame the proof covers.
func (p *importerProof) params() []byte {
	flags := byte(0)
	if p.CanImport {
		flags = 1
	}
	return append(appendVersion(nil, p.UCX), flags, byte(p.Want))
}

func (p *importerProof) encode() []byte {
	b := binary.LittleEndian.AppendUint16(p.params(), uint16(len(p.Proof)))
	return append(b, p.Proof...)
}

func decodeImporterProof(b []byte) (*importerProof, error) {
	const op = "share: importer proof"
	r := reader{b: b}
	p := &importerProof{UCX: r.version()}
	flags, want := r.u8(), Mode(r.u8())
	n := int(r.u16())
	if n > maxSealed {
		return nil, protoErr(op, "a proof of %d bytes (at most %d)", n, maxSealed)
	}
	p.Proof = bytes.Clone(r.take(n))
	if err := r.done(op, "proof"); err != nil {
		return nil, err
	}
	if flags&^1 != 0 {
		return nil, protoErr(op, "unknown flags %#x", flags)
	}
	if want > ModeRkey {
		return nil, protoErr(op, "unknown mode %d", want)
	}
	p.CanImport, p.Want = flags == 1, want
	return p, nil
}

// accepted is what the exporter seals once both proofs hold: the
// session's parameters, bound to the transcript (t3).
type accepted struct {
	T3       [32]byte
	UCX      ucs.Version
	Mode     Mode
	Exporter [16]byte
	Session  [16]byte
	Port     uint16 // rkey mode: the data path's port; export mode 0
}

const acceptedMagic = "UCXACCPT"

func (a *accepted) encode() []byte {
	b := append([]byte(acceptedMagic), a.T3[:]...)
	b = appendVersion(b, a.UCX)
	b = append(b, byte(a.Mode))
	b = append(b, a.Exporter[:]...)
	b = append(b, a.Session[:]...)
	return binary.LittleEndian.AppendUint16(b, a.Port)
}

// decodeAccepted parses an opened accepted message and checks it against
// the transcript t3.
func decodeAccepted(b []byte, t3 [32]byte) (*accepted, error) {
	const op = "share: accepted"
	r := reader{b: b}
	if !bytes.Equal(r.take(len(acceptedMagic)), []byte(acceptedMagic)) {
		return nil, protoErr(op, "not an accepted message (bad magic)")
	}
	a := &accepted{}
	copy(a.T3[:], r.take(32))
	a.UCX, a.Mode = r.version(), Mode(r.u8())
	copy(a.Exporter[:], r.take(16))
	copy(a.Session[:], r.take(16))
	a.Port = r.u16()
	if err := r.done(op, "accepted"); err != nil {
		return nil, err
	}
	switch {
	case a.T3 != t3:
		return nil, &ucs.Error{Op: op, Err: ErrSeal, Reason: "the accepted message was sealed for another handshake (replayed)"}
	case a.Mode != ModeExport && a.Mode != ModeRkey:
		return nil, protoErr(op, "mode %d is neither export nor rkey", a.Mode)
	case a.Mode == ModeRkey && a.Port == 0:
		return nil, protoErr(op, "rkey mode without a data port")
	case a.Mode == ModeExport && a.Port != 0:
		return nil, protoErr(op, "a data port (%d) in export mode", a.Port)
	}
	return a, nil
}

// transcript is the handshake's running hash, as both sides compute it.
type transcript struct {
	t1, t2, t3 [32]byte
}

// lp appends b with its length (u32) ahead.
func lp(dst, b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(dst, uint32(len(b))), b...)
}

// first is t1 = SHA-256("ucxshare/3" ‖ lp(importer hello) ‖ lp(channel
// binding) ‖ exporter nonce): what the exporter proves.
func (t *transcript) first(hello []byte, binding []byte, nonceE [nonceSize]byte) {
	b := lp(lp([]byte("ucxshare/3"), hello), binding)
	t.t1 = sha256.Sum256(append(b, nonceE[:]...))
}

// second is t2 = SHA-256(t1 ‖ lp(exporter hello) ‖ lp(importer's
// params)): what the importer proves.
func (t *transcript) second(hello []byte, params []byte) {
	t.t2 = sha256.Sum256(lp(lp(t.t1[:], hello), params))
}

// third is t3 = SHA-256(t2 ‖ lp(importer's sealed proof)): what accepted
// and the bind claim seal.
func (t *transcript) third(proof []byte) {
	t.t3 = sha256.Sum256(lp(t.t2[:], proof))
}

func proofMessage(role string, t [32]byte) []byte { return append([]byte(role), t[:]...) }

// The proofs' and the bind claim's labels.
const (
	exporterProofLabel = "UCXPRF-E"
	importerProofLabel = "UCXPRF-I"
	bindLabel          = "UCX-BIND"
)

// bindMessage is what an importer seals to claim its session's connection
// to the exporter's data path (the header of the bind message): the data
// path holds no secret, so it hands each header to the exporter, which
// opens it. It seals this handshake's transcript, so that it is worth
// nothing in another session.
func bindMessage(t3 [32]byte) []byte { return proofMessage(bindLabel, t3) }

// checkSealed opens sealed with s and says whether it holds want. The
// bytes come from a peer that may not hold the secret: a Sealer that
// panics on them fails the check, it does not end the process.
func checkSealed(s Sealer, sealed, want []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	msg, err := s.Open(sealed)
	return err == nil && bytes.Equal(msg, want)
}

// channelBinding is what binds the proofs to conn beyond its addresses:
// for TLS, 32 bytes of keying material exported from the session (RFC
// 5705, label "EXPORTER-ucxshare/3"), after the TLS handshake; nothing
// for other connections.
func channelBinding(ctx context.Context, conn net.Conn) ([]byte, error) {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil, nil
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, &ucs.Error{Op: "share: channel binding", Err: ucs.ErrIOError, Reason: "the TLS handshake failed", Wrapped: err}
	}
	cs := tc.ConnectionState()
	km, err := cs.ExportKeyingMaterial("EXPORTER-ucxshare/3", nil, 32)
	if err != nil {
		return nil, &ucs.Error{Op: "share: channel binding", Err: ErrRefused,
			Reason: "the TLS session exports no keying material (TLS 1.3, or 1.2 with extended master secret, is needed)", Wrapped: err}
	}
	return km, nil
}

// sameAddress says whether the address an importer dialed is a, an
// address of this side of the connection (host:port for IP, compared
// without zones, so an IPv6 link-local address matches on any link; the
// path for a Unix socket).
func sameAddress(dialed string, a net.Addr) bool {
	if a == nil {
		return false
	}
	if x, err := netip.ParseAddrPort(dialed); err == nil {
		y, err := netip.ParseAddrPort(a.String())
		return err == nil && x.Addr().Unmap().WithZone("") == y.Addr().Unmap().WithZone("") && x.Port() == y.Port()
	}
	return dialed == a.String()
}

// dialedAddress is what an importer says it dialed: conn's remote
// address, as the exporter's side sees its own local one.
func dialedAddress(conn net.Conn) (string, error) {
	a := conn.RemoteAddr()
	if a == nil || a.String() == "" || len(a.String()) > maxDialed {
		return "", &ucs.Error{Op: "share: open session", Err: ucs.ErrInvalidParam,
			Reason: fmt.Sprintf("the control connection's remote address %q is not 1 to %d bytes", addrString(a), maxDialed)}
	}
	return a.String(), nil
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
