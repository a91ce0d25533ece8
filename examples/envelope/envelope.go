// Package envelope is the small versioned, authenticated header the
// exporter and importer examples wrap a memory key in: who exported what,
// where, for how long, and an HMAC-SHA256 over all of it with a key both
// sides hold. The importer checks it before any byte of the key reaches UCX.
package envelope

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Magic starts every envelope.
const Magic = "UCXGOENV"

// Version is the only format version this package writes and reads.
const Version = 1

// Mode says what the envelope carries.
type Mode uint8

const (
	ModeExport Mode = 1 // an exported memory-handle descriptor (ucp_memh_pack EXPORT)
	ModeRkey   Mode = 2 // a packed remote key (ucp_rkey_pack)
)

func (m Mode) String() string {
	switch m {
	case ModeExport:
		return "export"
	case ModeRkey:
		return "rkey"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Distinct failures of Open, for errors.Is.
var (
	ErrTruncated = errors.New("envelope: truncated")
	ErrMagic     = errors.New("envelope: bad magic")
	ErrVersion   = errors.New("envelope: unsupported version")
	ErrMAC       = errors.New("envelope: authentication failed (HMAC mismatch)")
	ErrExpired   = errors.New("envelope: lease expired")
	ErrMalformed = errors.New("envelope: malformed")
)

// Envelope is the authenticated description of an exported region.
type Envelope struct {
	UCXMajor, UCXMinor, UCXPatch uint8
	ExporterID                   [16]byte
	Address                      uint64 // region address in the exporter
	Length                       uint64
	Prot                         uint32 // ucp.Prot the region was mapped with
	Mode                         Mode
	Issued, Expires              time.Time
	Key                          []byte // descriptor (ModeExport) or packed rkey (ModeRkey)
}

const (
	headerSize = 8 + 2 + 2 + 4 + 16 + 8 + 8 + 4 + 4 + 8 + 8 + 4 // through key length
	macSize    = sha256.Size
	maxKeySize = 64 << 10
)

// Seal encodes e and appends its HMAC under secret.
func Seal(e *Envelope, secret []byte) ([]byte, error) {
	if len(secret) == 0 {
		return nil, fmt.Errorf("envelope: empty HMAC key")
	}
	if len(e.Key) == 0 || len(e.Key) > maxKeySize {
		return nil, fmt.Errorf("envelope: key of %d bytes (1..%d)", len(e.Key), maxKeySize)
	}
	le := binary.LittleEndian
	b := make([]byte, 0, headerSize+len(e.Key)+macSize)
	b = append(b, Magic...)
	b = le.AppendUint16(b, Version)
	b = le.AppendUint16(b, 0) // flags
	b = append(b, e.UCXMajor, e.UCXMinor, e.UCXPatch, 0)
	b = append(b, e.ExporterID[:]...)
	b = le.AppendUint64(b, e.Address)
	b = le.AppendUint64(b, e.Length)
	b = le.AppendUint32(b, e.Prot)
	b = append(b, byte(e.Mode), 0, 0, 0)
	b = le.AppendUint64(b, uint64(e.Issued.UnixNano()))
	b = le.AppendUint64(b, uint64(e.Expires.UnixNano()))
	b = le.AppendUint32(b, uint32(len(e.Key)))
	b = append(b, e.Key...)
	mac := hmac.New(sha256.New, secret)
	mac.Write(b)
	return mac.Sum(b), nil
}

// Open checks b (magic, version, length, HMAC under secret, lease at now)
// and decodes it. Each failure wraps its own sentinel error.
func Open(b, secret []byte, now time.Time) (*Envelope, error) {
	le := binary.LittleEndian
	if len(b) < len(Magic) {
		return nil, fmt.Errorf("%w: %d bytes", ErrTruncated, len(b))
	}
	if string(b[:len(Magic)]) != Magic {
		return nil, ErrMagic
	}
	if len(b) < 10 {
		return nil, fmt.Errorf("%w: %d bytes", ErrTruncated, len(b))
	}
	if v := le.Uint16(b[8:]); v != Version {
		return nil, fmt.Errorf("%w: %d (this build reads %d)", ErrVersion, v, Version)
	}
	if len(b) < headerSize+macSize {
		return nil, fmt.Errorf("%w: %d bytes, header and MAC need %d", ErrTruncated, len(b), headerSize+macSize)
	}
	keyLen := int(le.Uint32(b[headerSize-4:]))
	if keyLen == 0 || keyLen > maxKeySize {
		return nil, fmt.Errorf("%w: key length %d", ErrMalformed, keyLen)
	}
	total := headerSize + keyLen + macSize
	if len(b) < total {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrTruncated, len(b), total)
	}
	if len(b) > total {
		return nil, fmt.Errorf("%w: %d bytes past the MAC", ErrMalformed, len(b)-total)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(b[:total-macSize])
	if !hmac.Equal(mac.Sum(nil), b[total-macSize:]) {
		return nil, ErrMAC
	}
	if flags := le.Uint16(b[10:]); flags != 0 {
		return nil, fmt.Errorf("%w: flags %#x", ErrMalformed, flags)
	}
	e := &Envelope{UCXMajor: b[12], UCXMinor: b[13], UCXPatch: b[14]}
	copy(e.ExporterID[:], b[16:32])
	e.Address = le.Uint64(b[32:])
	e.Length = le.Uint64(b[40:])
	e.Prot = le.Uint32(b[48:])
	e.Mode = Mode(b[52])
	e.Issued = time.Unix(0, int64(le.Uint64(b[56:])))
	e.Expires = time.Unix(0, int64(le.Uint64(b[64:])))
	e.Key = append([]byte(nil), b[headerSize:headerSize+keyLen]...)
	if e.Mode != ModeExport && e.Mode != ModeRkey {
		return nil, fmt.Errorf("%w: mode %d", ErrMalformed, b[52])
	}
	if !now.Before(e.Expires) {
		return nil, fmt.Errorf("%w: at %s (now %s)", ErrExpired, e.Expires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return e, nil
}
