package share

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/ucxgo/ucx/ucs"
)

// The control protocol, version 3 (docs/share-protocol.md). Every frame:
// u32 length of what follows (little-endian), u8 type, payload.
const (
	protoVersion = 3
	helloMagic   = "UCXSHARE"
	grantMagic   = "UCXGRANT"
	maxFrame     = 128 << 10
	maxKey       = 64 << 10
	maxRegionID  = 255
	maxReason    = 1024
)

type frameType uint8

const (
	frameHelloImporter frameType = 1  // importer's hello
	frameHelloExporter frameType = 2  // exporter's answer
	frameRefuse        frameType = 3  // either side: why it ends the session
	frameGrant         frameType = 4  // a sealed grant
	frameReady         frameType = 5  // every initial grant was sent
	frameRevoke        frameType = 6  // drop a region's generation
	frameAck           frameType = 7  // the generation is dropped
	frameBye           frameType = 8  // the sender ends the session cleanly
	frameProof         frameType = 9  // importer: its release and wants, and its proof over the transcript
	frameAccepted      frameType = 10 // exporter, sealed: the session's parameters; rkey mode: the data path's port
	frameDataPorts     frameType = 11 // importer, rkey mode: its data path's tcp ports with the exporter's host
)

func (t frameType) String() string {
	names := [...]string{"", "hello", "hello", "refuse", "grant", "ready", "revoke", "ack", "bye", "proof", "accepted", "data ports"}
	if int(t) < len(names) && t != 0 {
		return names[t]
	}
	return fmt.Sprintf("frame(%d)", uint8(t))
}

// MaxRegions is how many regions an exporter shares at most at once.
const MaxRegions = 4096

// Mode is how an exporter gives access to its memory.
type Mode uint8

const (
	// ModeAuto (an option only): export where a local memory domain can,
	// rkey otherwise.
	ModeAuto Mode = 0
	// ModeExport sends exported memory-handle descriptors: the importer
	// maps the exporter's memory itself (cross-GVMI, BlueField and
	// ConnectX hardware).
	ModeExport Mode = 1
	// ModeRkey sends packed remote keys: the importer reaches the memory
	// through an endpoint to the exporter.
	ModeRkey Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeExport:
		return "export"
	case ModeRkey:
		return "rkey"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Revocation reasons on the wire.
const (
	reasonRevoke  = 1 // Revoke or Session.Revoke
	reasonExpired = 2 // the lease ended
	reasonRotated = 3 // Rotate: a newer generation replaces it
	reasonRemoved = 4 // the region was removed
)

func reasonText(r uint8) string {
	switch r {
	case reasonRevoke:
		return "revoked by the exporter"
	case reasonExpired:
		return "its lease expired"
	case reasonRotated:
		return "rotated: a newer key replaced it"
	case reasonRemoved:
		return "the exporter stopped sharing it"
	}
	return fmt.Sprintf("reason %d", r)
}

func protoErr(op, format string, args ...any) error {
	return &ucs.Error{Op: op, Err: ErrProtocol, Reason: fmt.Sprintf(format, args...)}
}

// writeFrame writes one frame.
func writeFrame(w io.Writer, t frameType, payload []byte) error {
	b := make([]byte, 5, 5+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(1+len(payload)))
	b[4] = byte(t)
	_, err := w.Write(append(b, payload...))
	return err
}

// readFrame reads one frame, refusing one longer than maxFrame before
// reading it.
func readFrame(r io.Reader) (frameType, []byte, error) { return readFrameMax(r, maxFrame) }

// readFrameMax reads one frame, refusing one longer than limit bytes
// (type and payload) from its header alone, before it allocates: in the
// handshake each step's limit is its own (maxHelloFrame, ...).
func readFrameMax(r io.Reader, limit uint32) (frameType, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if frameType(h[4]) == frameRefuse {
		limit = max(limit, 2+maxReason) // a refusal says why at any step
	}
	if n == 0 || n > limit {
		return 0, nil, protoErr("share: read frame", "a %s frame of %d bytes (1 to %d here)", frameType(h[4]), n, limit)
	}
	p := make([]byte, n-1)
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // a header without its payload is no clean end
		}
		return 0, nil, err
	}
	return frameType(h[4]), p, nil
}

// reader decodes little-endian fields, remembering the first shortage.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return make([]byte, max(n, 0))
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *reader) u8() uint8   { return r.take(1)[0] }
func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }

// done reports a short or overlong message.
func (r *reader) done(op, what string) error {
	if r.bad {
		return protoErr(op, "truncated %s", what)
	}
	if len(r.b) != 0 {
		return protoErr(op, "%d bytes after the %s", len(r.b), what)
	}
	return nil
}

func appendVersion(b []byte, v ucs.Version) []byte {
	return append(b, byte(v.Major), byte(v.Minor), byte(v.Patch))
}

func (r *reader) version() ucs.Version {
	v := r.take(3)
	return ucs.Version{Major: uint(v[0]), Minor: uint(v[1]), Patch: uint(v[2])}
}

// maxDataPorts bounds the ports a data-ports frame lists.
const maxDataPorts = 64

// encodeDataPorts is the data-ports frame's payload: a count, then each
// port (u16, little-endian).
func encodeDataPorts(ports []uint16) []byte {
	b := []byte{byte(len(ports))}
	for _, p := range ports {
		b = binary.LittleEndian.AppendUint16(b, p)
	}
	return b
}

func decodeDataPorts(p []byte) ([]uint16, error) {
	const op = "share: data ports"
	if len(p) < 1 || int(p[0]) > maxDataPorts || len(p) != 1+2*int(p[0]) {
		return nil, protoErr(op, "a data-ports frame of %d bytes (a count up to %d, then 2 bytes a port)", len(p), maxDataPorts)
	}
	ports := make([]uint16, p[0])
	for i := range ports {
		if ports[i] = binary.LittleEndian.Uint16(p[1+2*i:]); ports[i] == 0 {
			return nil, protoErr(op, "port 0 in a data-ports frame")
		}
	}
	return ports, nil
}

// A refusal carries its cause as a code and its reason as text (never a
// secret or a key: reasons are this package's own words).
var refuseCauses = []error{ErrRefused, ErrSeal, ErrGrant, ErrProtocol, ErrRevoked, ucs.ErrTimedOut, ucs.ErrUnsupported}

func encodeRefuse(err error) []byte {
	code := byte(0)
	for i, c := range refuseCauses {
		if errors.Is(err, c) {
			code = byte(i)
			break
		}
	}
	reason := err.Error()
	var e *ucs.Error
	if errors.As(err, &e) && e.Reason != "" {
		reason = e.Reason
	}
	if len(reason) > maxReason {
		cut := maxReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	return append([]byte{code}, reason...)
}

func decodeRefuse(p []byte) (error, string) {
	if len(p) == 0 {
		return ErrRefused, "no reason given"
	}
	cause := ErrRefused
	if int(p[0]) < len(refuseCauses) {
		cause = refuseCauses[p[0]]
	}
	p = p[1:]
	if len(p) > maxReason {
		return ErrProtocol, fmt.Sprintf("a refusal with a %d-byte reason (at most %d)", len(p), maxReason)
	}
	return cause, string(bytes.ToValidUTF8(p, []byte("?")))
}

// revokeMsg asks to drop a generation (gen 0: every generation of the
// region); ackMsg says it is dropped.
type revokeMsg struct {
	Gen    uint64
	Reason uint8
	Region string
}

func (m *revokeMsg) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, m.Gen)
	b = append(b, m.Reason, byte(len(m.Region)))
	return append(b, m.Region...)
}

func decodeRevoke(p []byte) (*revokeMsg, error) {
	const op = "share: revoke"
	r := reader{b: p}
	m := &revokeMsg{Gen: r.u64(), Reason: r.u8()}
	m.Region = string(r.take(int(r.u8())))
	if err := r.done(op, "revoke"); err != nil {
		return nil, err
	}
	if err := checkRegionID(op, m.Region); err != nil {
		return nil, err
	}
	if m.Reason < reasonRevoke || m.Reason > reasonRemoved {
		return nil, protoErr(op, "unknown reason %d", m.Reason)
	}
	return m, nil
}

type ackMsg struct {
	Gen    uint64
	Region string
}

func (m *ackMsg) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, m.Gen)
	b = append(b, byte(len(m.Region)))
	return append(b, m.Region...)
}

func decodeAck(p []byte) (*ackMsg, error) {
	const op = "share: ack"
	r := reader{b: p}
	m := &ackMsg{Gen: r.u64()}
	m.Region = string(r.take(int(r.u8())))
	if err := r.done(op, "ack"); err != nil {
		return nil, err
	}
	if m.Gen == 0 {
		return nil, protoErr(op, "generation 0")
	}
	return m, checkRegionID(op, m.Region)
}

func checkRegionID(op, id string) error {
	if id == "" || len(id) > maxRegionID || !utf8.ValidString(id) {
		return &ucs.Error{Op: op, Err: ErrProtocol, Reason: fmt.Sprintf("region id of %d bytes is not 1 to %d bytes of UTF-8", len(id), maxRegionID)}
	}
	return nil
}

// grant is what a sealed grant says: one generation of one region, for one
// session, until Expires.
type grant struct {
	Format   uint16
	UCX      ucs.Version
	Mode     Mode
	Exporter [16]byte
	Session  [16]byte
	Gen      uint64
	Prot     uint32
	Address  uint64
	Length   uint64
	Issued   time.Time
	Expires  time.Time
	Region   string
	Key      []byte // exported descriptor (ModeExport) or packed region (ModeRkey)
}

const grantFormat = 1

func (g *grant) encode() []byte {
	le := binary.LittleEndian
	b := append([]byte(grantMagic), 0, 0)
	le.PutUint16(b[len(grantMagic):], g.Format)
	b = appendVersion(b, g.UCX)
	b = append(b, byte(g.Mode))
	b = append(b, g.Exporter[:]...)
	b = append(b, g.Session[:]...)
	b = le.AppendUint64(b, g.Gen)
	b = le.AppendUint32(b, g.Prot)
	b = le.AppendUint64(b, g.Address)
	b = le.AppendUint64(b, g.Length)
	b = le.AppendUint64(b, uint64(g.Issued.UnixNano()))
	b = le.AppendUint64(b, uint64(g.Expires.UnixNano()))
	b = append(b, byte(len(g.Region)))
	b = append(b, g.Region...)
	b = le.AppendUint32(b, uint32(len(g.Key)))
	return append(b, g.Key...)
}

// decodeGrant parses an opened grant's bytes; the field checks against
// the session are checkGrant's.
func decodeGrant(p []byte) (*grant, error) {
	const op = "share: open grant"
	r := reader{b: p}
	if !bytes.Equal(r.take(len(grantMagic)), []byte(grantMagic)) {
		return nil, &ucs.Error{Op: op, Err: ErrGrant, Reason: "not a grant (bad magic)"}
	}
	g := &grant{Format: r.u16()}
	if g.Format != grantFormat {
		return nil, &ucs.Error{Op: op, Err: ErrGrant, Reason: fmt.Sprintf("grant format %d; this importer reads format %d", g.Format, grantFormat)}
	}
	g.UCX = r.version()
	g.Mode = Mode(r.u8())
	copy(g.Exporter[:], r.take(16))
	copy(g.Session[:], r.take(16))
	g.Gen, g.Prot = r.u64(), r.u32()
	g.Address, g.Length = r.u64(), r.u64()
	g.Issued = time.Unix(0, int64(r.u64()))
	g.Expires = time.Unix(0, int64(r.u64()))
	g.Region = string(r.take(int(r.u8())))
	n := r.u32()
	if n > maxKey {
		return nil, &ucs.Error{Op: op, Err: ErrGrant, Reason: fmt.Sprintf("a key of %d bytes (at most %d)", n, maxKey)}
	}
	g.Key = bytes.Clone(r.take(int(n)))
	if err := r.done(op, "grant"); err != nil {
		return nil, &ucs.Error{Op: op, Err: ErrGrant, Reason: err.(*ucs.Error).Reason}
	}
	return g, nil
}
