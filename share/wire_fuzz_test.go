package share

// Fuzz targets of the control protocol's decoders (docs/share-protocol.md)
// and of the default Sealer. Each asserts that nothing panics, that an
// error is an *ucs.Error wrapping the cause the protocol names (ErrProtocol
// for the session's frames, ErrGrant for a grant's bytes), and, where the
// format is canonical (hellos, accepted frames, grants, revokes, acks),
// that what a decoder accepts encodes back to the very bytes it was given:
// a decoder that accepts two spellings of one message, or drops a byte,
// fails here.
//
// The seeds are encodings of real messages (f.Add) and, in
// testdata/fuzz, the frames of a real rkey-mode session captured on the
// wire (TestWriteWireCorpus writes them again: see its comment).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// fuzzSecret is the sealing secret of the fuzz targets (and of the session
// TestWriteWireCorpus captures).
var fuzzSecret = []byte("0123456789abcdef-fuzz-secret")

func fuzzSealer(tb testing.TB) Sealer {
	s, err := NewHMACSealer(fuzzSecret)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// The ids of the hello FuzzOpenGrant's importer holds; seed grants name
// them.
var (
	fuzzExporterID = [16]byte{0xe0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	fuzzSessionID  = [16]byte{0x50, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	fuzzUCX        = ucs.Version{Major: 1, Minor: 18, Patch: 1}
)

// sampleGrant is a grant as an exporter makes it: issued now, for a
// century (so that a corpus entry written today still opens).
func sampleGrant(mode Mode, region string, key []byte) *grant {
	now := time.Unix(0, time.Now().UnixNano()) // no monotonic reading
	return &grant{Format: grantFormat, UCX: fuzzUCX, Mode: mode, Exporter: fuzzExporterID,
		Session: fuzzSessionID, Gen: 1, Prot: uint32(ucp.ProtAll), Address: 0x7f0000001000,
		Length: 1 << 20, Issued: now, Expires: now.Add(100 * 365 * 24 * time.Hour), Region: region, Key: key}
}

// sampleDescriptor is an exported-memory descriptor of the layout UCX 1.15
// and later pack (one IB memory domain), for 1 MiB at 0x7f0000001000.
func sampleDescriptor(mkeySize int) []byte {
	le := binary.LittleEndian
	b := make([]byte, 44)
	b[0] = 43
	le.PutUint16(b[1:], 1)    // exported
	le.PutUint64(b[3:], 1<<2) // the exporter's memory domain 2
	le.PutUint64(b[12:], 0x7f0000001000)
	le.PutUint64(b[20:], 1<<20)
	le.PutUint64(b[28:], 0x1122334455667788)
	le.PutUint64(b[36:], 42)
	gid := []byte{'i', 'b', 0xb8, 0xce, 0xf6, 0x03, 0x00, 0x12, 0x34, 0x56}
	entry := []byte{byte(mkeySize + len(gid) + 3 - 1), byte(mkeySize)}
	for i := range mkeySize {
		entry = append(entry, byte(0x10+i))
	}
	entry = append(entry, byte(len(gid)))
	return append(append(b, entry...), gid...)
}

// samplePackedRegion is what Mem.PackRegion makes for a 1 MiB mapping at
// 0x7f0000001000 with a short key: the key of an rkey-mode grant.
func samplePackedRegion() []byte {
	b := []byte("UCXr")
	b = binary.LittleEndian.AppendUint64(b, 0x7f0000001000)
	b = binary.LittleEndian.AppendUint64(b, 1<<20)
	b = append(b, 0x03, 0x00, 0x00, 0x00, 0x80, 0x00) // a packed UCX key's first bytes
	return binary.LittleEndian.AppendUint32(b, 0)
}

func sampleHellos() (*importerHello, *exporterHello) {
	ih := &importerHello{Proto: protoVersion, Dialed: "192.0.2.2:13337"}
	eh := &exporterHello{Proto: protoVersion, Proof: bytes.Repeat([]byte{0xa5}, 40+sha256.Size)}
	for i := range ih.Nonce {
		ih.Nonce[i], eh.Nonce[i] = byte(i), byte(0x80+i)
	}
	return ih, eh
}

// sampleAccepted is an accepted message of the fuzz ids, for transcript
// fuzzT3.
func sampleAccepted(mode Mode, port uint16) *accepted {
	return &accepted{T3: fuzzT3, UCX: fuzzUCX, Mode: mode, Exporter: fuzzExporterID, Session: fuzzSessionID, Port: port}
}

var fuzzT3 = sha256.Sum256([]byte("a transcript"))

// wantCause fails unless err is an *ucs.Error wrapping cause.
func wantCause(t *testing.T, err, cause error) {
	t.Helper()
	var e *ucs.Error
	if !errors.As(err, &e) || !errors.Is(err, cause) {
		t.Fatalf("error %q (%T) does not wrap %v", err, err, cause)
	}
}

func frame(t frameType, p []byte) []byte {
	var b bytes.Buffer
	writeFrame(&b, t, p)
	return b.Bytes()
}

// FuzzReadFrame reads frames from a stream until it ends: a frame is read
// whole or refused by its length alone, and one read writes back as the
// bytes it was read from.
func FuzzReadFrame(f *testing.F) {
	ih, eh := sampleHellos()
	f.Add(frame(frameHelloImporter, ih.encode()))
	f.Add(append(frame(frameHelloExporter, eh.encode()), frame(frameAccepted, sampleAccepted(ModeRkey, 40000).encode())...))
	f.Add(append(frame(frameProof, (&importerProof{UCX: fuzzUCX, Proof: []byte("p")}).encode()), frame(frameReady, nil)...))
	f.Add(frame(frameRevoke, (&revokeMsg{Gen: 3, Reason: reasonRotated, Region: "a"}).encode()))
	f.Add(frame(frameAck, (&ackMsg{Gen: 3, Region: "a"}).encode()))
	f.Add(frame(frameRefuse, encodeRefuse(&ucs.Error{Op: "x", Err: ErrSeal, Reason: "no"})))
	f.Add(frame(frameBye, nil))
	f.Add([]byte{0, 0, 0, 0, 1})                               // length 0
	f.Add([]byte{1, 0, 2, 0, 4})                               // one longer than maxFrame
	f.Add(binary.LittleEndian.AppendUint32(nil, maxFrame))     // the longest, truncated
	f.Add(append(binary.LittleEndian.AppendUint32(nil, 2), 5)) // truncated payload
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			before := r.Len()
			typ, p, err := readFrame(r)
			consumed := data[len(data)-before : len(data)-r.Len()]
			if err != nil {
				switch {
				case errors.Is(err, ErrProtocol):
					wantCause(t, err, ErrProtocol)
					if len(consumed) != 5 {
						t.Fatalf("refused a frame after reading %d bytes of it, not its 5-byte header", len(consumed))
					}
					if n := binary.LittleEndian.Uint32(consumed); n != 0 && n <= maxFrame {
						t.Fatalf("refused a frame of valid length %d: %v", n, err)
					}
				case err == io.EOF:
					if len(consumed) != 0 {
						t.Fatalf("io.EOF after %d bytes of a frame", len(consumed))
					}
				case err == io.ErrUnexpectedEOF:
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if 1+len(p) > maxFrame {
				t.Fatalf("accepted a frame of %d bytes", 1+len(p))
			}
			if got := frame(typ, p); !bytes.Equal(got, consumed) {
				t.Fatalf("frame read from %x writes back as %x", consumed, got)
			}
		}
	})
}

func FuzzDecodeImporterHello(f *testing.F) {
	ih, _ := sampleHellos()
	for i, dialed := range []string{ih.Dialed, "[2001:db8::1]:13337", "/run/ucxshare.sock", "x", strings.Repeat("a", 255)} {
		h := *ih
		h.Dialed, h.TLS = dialed, i%2 == 1
		f.Add(h.encode())
	}
	bad := ih.encode()
	bad[len(helloMagic)+2+nonceSize] = 2 // an unknown flag
	f.Add(bad)
	f.Add(append([]byte(helloMagic), 2, 0, 1, 18, 1, 0, 0)) // a version-2 hello
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := decodeImporterHello(p)
		if err != nil {
			wantCause(t, err, ErrProtocol)
			return
		}
		if h.Proto != protoVersion {
			return // only the version is read: the caller refuses it by version
		}
		if h.Dialed == "" || len(h.Dialed) > maxDialed {
			t.Fatalf("accepted a dialed address of %d bytes", len(h.Dialed))
		}
		if got := h.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, which encodes back as %x", p, got)
		}
	})
}

func FuzzDecodeExporterHello(f *testing.F) {
	_, eh := sampleHellos()
	f.Add(eh.encode())
	x := *eh
	x.Proof = nil
	f.Add(x.encode())
	x.Proof = make([]byte, maxSealed+1)
	f.Add(x.encode())
	f.Add(append([]byte(helloMagic), 2, 0, 1, 18, 1, 2)) // a version-2 hello's start
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := decodeExporterHello(p)
		if err != nil {
			wantCause(t, err, ErrProtocol)
			return
		}
		if h.Proto != protoVersion {
			return // only the version is read: the caller refuses it by version
		}
		if len(h.Proof) > maxSealed {
			t.Fatalf("accepted a proof of %d bytes", len(h.Proof))
		}
		if got := h.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, which encodes back as %x", p, got)
		}
	})
}

func FuzzDecodeImporterProof(f *testing.F) {
	for _, want := range []Mode{ModeAuto, ModeExport, ModeRkey} {
		for _, can := range []bool{false, true} {
			f.Add((&importerProof{UCX: fuzzUCX, CanImport: can, Want: want, Proof: bytes.Repeat([]byte{7}, 72)}).encode())
		}
	}
	f.Add((&importerProof{UCX: fuzzUCX, Want: 3}).encode())
	f.Fuzz(func(t *testing.T, p []byte) {
		ip, err := decodeImporterProof(p)
		if err != nil {
			wantCause(t, err, ErrProtocol)
			return
		}
		if ip.Want > ModeRkey || len(ip.Proof) > maxSealed {
			t.Fatalf("accepted mode %d, a proof of %d bytes", ip.Want, len(ip.Proof))
		}
		if got := ip.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, which encodes back as %x", p, got)
		}
	})
}

// FuzzDecodeAccepted: an opened accepted message is refused unless it
// names the transcript it is checked against (ErrSeal), its mode is export
// (no port) or rkey (a port); what is accepted encodes back to the very
// bytes. Each input is checked against the transcript it names and
// against another.
func FuzzDecodeAccepted(f *testing.F) {
	for _, a := range []*accepted{sampleAccepted(ModeRkey, 40000), sampleAccepted(ModeExport, 0),
		sampleAccepted(ModeRkey, 0), sampleAccepted(ModeExport, 1), sampleAccepted(3, 1)} {
		f.Add(a.encode())
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		var named [32]byte
		if len(p) >= len(acceptedMagic)+32 {
			copy(named[:], p[len(acceptedMagic):])
		}
		other := named
		other[0] ^= 1
		if _, err := decodeAccepted(p, other); err == nil {
			t.Fatal("accepted a message sealed for another transcript")
		}
		a, err := decodeAccepted(p, named)
		if err != nil {
			if !errors.Is(err, ErrSeal) {
				wantCause(t, err, ErrProtocol)
			}
			return
		}
		if (a.Mode == ModeExport) != (a.Port == 0) || (a.Mode != ModeExport && a.Mode != ModeRkey) {
			t.Fatalf("accepted port %d in %s mode", a.Port, a.Mode)
		}
		if got := a.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, which encodes back as %x", p, got)
		}
	})
}

func FuzzDecodeDataPorts(f *testing.F) {
	for _, p := range [][]byte{encodeDataPorts(nil), encodeDataPorts([]uint16{40000}), encodeDataPorts([]uint16{1, 2, 65535}),
		{1, 0, 0}, {2, 1, 0}, {65}, {}} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		ports, err := decodeDataPorts(p)
		if err != nil {
			wantCause(t, err, ErrProtocol)
			return
		}
		if len(ports) > maxDataPorts || slices.Contains(ports, 0) {
			t.Fatalf("data ports %v taken", ports)
		}
		if got := encodeDataPorts(ports); !bytes.Equal(got, p) {
			t.Fatalf("data ports %x, which encode back as %x", p, got)
		}
	})
}

func addGrantSeeds(f *testing.F) {
	f.Add(sampleGrant(ModeRkey, "a", samplePackedRegion()).encode())
	f.Add(sampleGrant(ModeExport, "region/é", sampleDescriptor(6)).encode())
	f.Add(sampleGrant(ModeExport, strings.Repeat("r", maxRegionID), sampleDescriptor(14)).encode())
	g := sampleGrant(ModeRkey, "", nil)
	g.Gen, g.Length = 0, 0
	f.Add(g.encode())
	g = sampleGrant(ModeRkey, "k", nil)
	g.Key = make([]byte, maxKey)
	f.Add(g.encode())
	g.Format = 2
	f.Add(g.encode())
}

func FuzzDecodeGrant(f *testing.F) {
	addGrantSeeds(f)
	f.Fuzz(func(t *testing.T, p []byte) {
		g, err := decodeGrant(p)
		if err != nil {
			wantCause(t, err, ErrGrant)
			return
		}
		if g.Format != grantFormat || len(g.Key) > maxKey || len(g.Region) > maxRegionID {
			t.Fatalf("accepted format %d, a %d-byte key, a %d-byte region id", g.Format, len(g.Key), len(g.Region))
		}
		if got := g.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, which encodes back as %x", p, got)
		}
	})
}

// FuzzOpenGrant seals the bytes (so they authenticate) and opens them as
// an importer of an rkey-mode and of an export-mode session does: an
// authentic grant is either refused with ErrGrant (ErrRevoked once
// expired) or satisfies every check the protocol lists.
func FuzzOpenGrant(f *testing.F) {
	addGrantSeeds(f)
	s := fuzzSealer(f)
	imps := []*Importer{
		{sealer: s, acc: sampleAccepted(ModeRkey, 40000), o: importerOptions{skew: 2 * time.Second}},
		{sealer: s, acc: sampleAccepted(ModeExport, 0), o: importerOptions{skew: 2 * time.Second}},
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		sealed, err := s.Seal(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range imps {
			now, h := time.Now(), imp.acc
			g, err := imp.openGrant(sealed)
			if err != nil {
				if !errors.Is(err, ErrRevoked) {
					wantCause(t, err, ErrGrant)
				}
				continue
			}
			switch {
			case g.UCX != h.UCX || g.Exporter != h.Exporter || g.Session != h.Session || g.Mode != h.Mode:
				t.Fatal("accepted a grant of another release, exporter, session or mode")
			case g.Gen == 0 || len(g.Key) == 0 || g.Region == "" || !utf8.ValidString(g.Region):
				t.Fatalf("accepted generation %d, a %d-byte key, region id %q", g.Gen, len(g.Key), g.Region)
			case g.Length == 0 || g.Length > 1<<48 || g.Address+g.Length < g.Address:
				t.Fatalf("accepted %d bytes at %#x", g.Length, g.Address)
			case ucp.Prot(g.Prot)&^ucp.ProtAll != 0 || ucp.Prot(g.Prot)&(ucp.ProtRemoteRead|ucp.ProtRemoteWrite) == 0:
				t.Fatalf("accepted protection %#x", g.Prot)
			case !g.Expires.After(now) || !g.Expires.After(g.Issued) || g.Issued.After(time.Now().Add(imp.o.skew)):
				t.Fatalf("accepted a grant issued %v, expiring %v", g.Issued, g.Expires)
			}
		}
	})
}

func FuzzDecodeRevoke(f *testing.F) {
	for r := uint8(reasonRevoke); r <= reasonRemoved; r++ {
		f.Add((&revokeMsg{Gen: uint64(r) - 1, Reason: r, Region: "region-" + fmt.Sprint(r)}).encode())
	}
	f.Add((&revokeMsg{Gen: 1 << 63, Reason: reasonRevoke, Region: strings.Repeat("é", 127)}).encode())
	f.Add((&revokeMsg{Gen: 1, Reason: 9, Region: "\xff"}).encode())
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := decodeRevoke(p)
		if err != nil {
			wantCause(t, err, ErrProtocol)
			return
		}
		if m.Reason < reasonRevoke || m.Reason > reasonRemoved || checkRegionID("", m.Region) != nil {
			t.Fatalf("accepted reason %d, region id %q", m.Reason, m.Region)
		}
		if got := m.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, which encodes back as %x", p, got)
		}
	})
}

func FuzzDecodeAck(f *testing.F) {
	f.Add((&ackMsg{Gen: 1, Region: "a"}).encode())
	f.Add((&ackMsg{Gen: 0, Region: "a"}).encode())
	f.Add((&ackMsg{Gen: ^uint64(0), Region: strings.Repeat("x", maxRegionID)}).encode())
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := decodeAck(p)
		if err != nil {
			wantCause(t, err, ErrProtocol)
			return
		}
		if m.Gen == 0 || checkRegionID("", m.Region) != nil {
			t.Fatalf("accepted generation %d, region id %q", m.Gen, m.Region)
		}
		if got := m.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, which encodes back as %x", p, got)
		}
	})
}

// FuzzDecodeRefuse: a refusal always decodes (to one of the causes and
// printable text within maxReason bytes), and a cause and valid reason
// survive encodeRefuse and decodeRefuse.
func FuzzDecodeRefuse(f *testing.F) {
	for _, c := range refuseCauses {
		f.Add(encodeRefuse(&ucs.Error{Op: "share: session", Err: c, Reason: "because " + c.Error()}))
	}
	f.Add([]byte{})
	f.Add([]byte{200, 'x', 0xff})
	f.Add(append([]byte{1}, bytes.Repeat([]byte("é"), maxReason)...))
	f.Fuzz(func(t *testing.T, p []byte) {
		cause, reason := decodeRefuse(p)
		if len(p) > 1+maxReason {
			if cause != ErrProtocol {
				t.Fatalf("an over-long refusal decodes as %v", cause)
			}
			return
		}
		if !slices.Contains(refuseCauses, cause) {
			t.Fatalf("cause %v is not one of the protocol's", cause)
		}
		if len(p) > 0 && int(p[0]) < len(refuseCauses) && cause != refuseCauses[p[0]] {
			t.Fatalf("code %d decodes as %v", p[0], cause)
		}
		if !utf8.ValidString(reason) || len(reason) > maxReason {
			t.Fatalf("reason of %d bytes, valid UTF-8 %v", len(reason), utf8.ValidString(reason))
		}
		if reason == "" {
			return
		}
		c2, r2 := decodeRefuse(encodeRefuse(&ucs.Error{Op: "x", Err: cause, Reason: reason}))
		if c2 != cause || r2 != reason {
			t.Fatalf("(%v, %q) comes back as (%v, %q)", cause, reason, c2, r2)
		}
	})
}

// FuzzHMACSealer: Open returns exactly what Seal sealed, refuses every
// change of a sealed message (a flipped bit, a truncation, an extension),
// and accepts arbitrary bytes only where they are what Seal makes of what
// Open returns; its errors hold neither the secret nor the bytes.
func FuzzHMACSealer(f *testing.F) {
	f.Add([]byte(nil), uint8(0), uint32(0), []byte(nil))
	f.Add(proofMessage(importerProofLabel, fuzzT3), uint8(0), uint32(77), []byte{0})
	f.Add(sampleGrant(ModeRkey, "a", samplePackedRegion()).encode(), uint8(1), uint32(40), []byte("x"))
	f.Add([]byte("m"), uint8(2), uint32(3), bytes.Repeat([]byte{0xaa}, sha256.Size))
	f.Add(bytes.Repeat([]byte{7}, sha256.Size+5), uint8(3), uint32(0), []byte(nil))
	s := fuzzSealer(f)
	other, err := NewHMACSealer(append(bytes.Clone(fuzzSecret), '2'))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte, op uint8, pos uint32, extra []byte) {
		opened := func(sealer Sealer, b []byte) ([]byte, bool) {
			out, err := sealer.Open(b)
			if err != nil {
				// (Bytes shorter than 8 may occur in any text by chance.)
				if strings.Contains(err.Error(), string(fuzzSecret)) || (len(b) >= 8 && strings.Contains(err.Error(), string(b))) {
					t.Fatalf("Open's error %q holds the secret or the sealed bytes", err)
				}
				return nil, false
			}
			return out, true
		}
		sealed, err := s.Seal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if len(sealed) != len(msg)+sha256.Size {
			t.Fatalf("sealed %d bytes into %d", len(msg), len(sealed))
		}
		if out, ok := opened(s, sealed); !ok || !bytes.Equal(out, msg) {
			t.Fatalf("Open(Seal(%x)) = %x, %v", msg, out, ok)
		}
		if _, ok := opened(other, sealed); ok {
			t.Fatal("another secret opened the message")
		}
		var changed []byte
		switch op % 4 {
		case 0: // flip one bit
			changed = bytes.Clone(sealed)
			i := int(pos % uint32(len(changed)*8))
			changed[i/8] ^= 1 << (i % 8)
		case 1: // truncate
			changed = sealed[:int(pos%uint32(len(sealed)))]
		case 2: // extend
			if len(extra) == 0 {
				extra = []byte{byte(pos)}
			}
			changed = append(bytes.Clone(sealed), extra...)
		case 3: // arbitrary bytes: msg itself
			if out, ok := opened(s, msg); ok {
				if again, _ := s.Seal(out); !bytes.Equal(again, msg) {
					t.Fatalf("Open accepted %x, which Seal did not make", msg)
				}
			}
			return
		}
		if out, ok := opened(s, changed); ok {
			t.Fatalf("Open accepted %x (changed from %x) as %x", changed, sealed, out)
		}
	})
}

// TestWriteWireCorpus captures the frames of a real rkey-mode session (an
// exporter with two regions, an importer that reads, a rotation, a
// revocation, the close) and writes them under testdata/fuzz as the
// corpus of the targets above. It runs only with
// UCXGO_SHARE_WRITE_CORPUS=1: go test ./share -run TestWriteWireCorpus.
func TestWriteWireCorpus(t *testing.T) {
	if os.Getenv("UCXGO_SHARE_WRITE_CORPUS") != "1" {
		t.Skip("writes the fuzz corpus; set UCXGO_SHARE_WRITE_CORPUS=1")
	}
	rel := ucs.LoadedVersion()
	s := fuzzSealer(t)
	a, b := testMemory(t, 64<<10), testMemory(t, 4096) // closed after e
	e, err := NewExporter(s, WithMode(ModeRkey))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingListener{Listener: l}
	served := make(chan error, 1)
	go func() { served <- e.Serve(rec) }()
	if err := e.Add(context.Background(), "a", a, ReadWrite); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(context.Background(), "régión-b", b, ReadOnly); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	imp, err := Dial(ctx, "tcp", l.Addr().String(), s)
	if err != nil {
		t.Fatal(err)
	}
	r, err := imp.Region("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Rotate(ctx, "a", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Remove(ctx, "régión-b"); err != nil {
		t.Fatal(err)
	}
	if err := imp.Close(); err != nil {
		t.Fatal(err)
	}
	// A second session, refused: the importer holds another secret.
	wrong, err := NewHMACSealer([]byte("another secret, as long as needed"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, "tcp", l.Addr().String(), wrong); !errors.Is(err, ErrSeal) {
		t.Fatalf("a session under another secret: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("real-%d.%d.%d", rel.Major, rel.Minor, rel.Patch)
	bs := func(b []byte) string { return fmt.Sprintf("[]byte(%q)", b) }
	write := func(target, file string, lines ...string) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		out.WriteString("go test fuzz v1\n")
		for _, l := range lines {
			out.WriteString(l + "\n")
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	count := map[string]int{}
	for i, session := range []string{"session", "refused"} {
		toImp, toExp := rec.streams(i)
		write("FuzzReadFrame", name+"-"+session+"-exporter-stream", bs(toImp))
		write("FuzzReadFrame", name+"-"+session+"-importer-stream", bs(toExp))
		for _, st := range []struct {
			from string
			b    []byte
		}{{"exporter", toImp}, {"importer", toExp}} {
			rd := bytes.NewReader(st.b)
			for {
				typ, p, err := readFrame(rd)
				if err != nil {
					break
				}
				key := st.from + "-" + typ.String()
				count[key]++
				file := fmt.Sprintf("%s-%s-%d", name, key, count[key])
				switch typ {
				case frameHelloImporter:
					write("FuzzDecodeImporterHello", file, bs(p))
				case frameHelloExporter:
					write("FuzzDecodeExporterHello", file, bs(p))
				case frameAccepted:
					write("FuzzDecodeAccepted", file, bs(p[:len(p)-sha256.Size]))
				case frameGrant:
					body := p[:len(p)-sha256.Size]
					write("FuzzDecodeGrant", file, bs(body))
					write("FuzzOpenGrant", file, bs(body))
					write("FuzzHMACSealer", file, bs(body), "uint8(0)", "uint32(1)", bs(nil))
				case frameRevoke:
					write("FuzzDecodeRevoke", file, bs(p))
				case frameAck:
					write("FuzzDecodeAck", file, bs(p))
				case frameRefuse:
					write("FuzzDecodeRefuse", file, bs(p))
				case frameProof:
					write("FuzzDecodeImporterProof", file, bs(p))
				}
			}
		}
	}
	t.Logf("frames captured: %v", count)
}

// testMemory is n bytes of shareable memory, closed when the test ends:
// make it before the exporter that shares it, which must close first.
func testMemory(t *testing.T, n int) *Memory {
	t.Helper()
	m, err := NewMemory(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

// recordingListener records the bytes of every connection it accepts,
// both ways.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*recordingConn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rc := &recordingConn{Conn: c, l: l}
	l.conns = append(l.conns, rc)
	return rc, nil
}

// streams are the bytes the exporter wrote (to the importer) and read
// (from it) on its i-th connection.
func (l *recordingListener) streams(i int) (toImporter, toExporter []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.conns[i].out.Bytes()), bytes.Clone(l.conns[i].in.Bytes())
}

type recordingConn struct {
	net.Conn
	l       *recordingListener
	in, out bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.in.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.mu.Lock()
	c.out.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}
