package share

import (
	"crypto/hmac"
	"crypto/sha256"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucs"
)

// Sealer protects the grants an exporter sends: Seal makes the bytes an
// importer can prove came from a holder of the same secret, Open proves it
// and returns the bytes sealed. Open must refuse anything Seal did not
// produce under the same secret, and must never return an error that
// contains the secret or the sealed bytes. The default's errors wrap
// ErrSeal. Implementations are used from
// several goroutines at once.
type Sealer interface {
	Seal(msg []byte) ([]byte, error)
	Open(sealed []byte) ([]byte, error)
}

// MinSecret is the shortest secret NewHMACSealer accepts, in bytes.
const MinSecret = 16

type hmacSealer struct{ key []byte }

// NewHMACSealer returns the default Sealer: the message followed by its
// HMAC-SHA256 under secret (at least MinSecret bytes, copied). It
// authenticates and does not encrypt: the sealed bytes (the region's
// address and length, the packed key) are readable on the wire, which is
// the control connection the caller chose (wrap it in TLS for secrecy).
func NewHMACSealer(secret []byte) (Sealer, error) {
	if len(secret) < MinSecret {
		return nil, errs.New("share: new HMAC sealer", ErrSeal, "the secret has %d bytes; at least %d are needed", len(secret), MinSecret)
	}
	return &hmacSealer{key: append([]byte(nil), secret...)}, nil
}

func (s *hmacSealer) mac(msg []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write(msg)
	return h.Sum(nil)
}

func (s *hmacSealer) Seal(msg []byte) ([]byte, error) {
	out := make([]byte, 0, len(msg)+sha256.Size)
	out = append(out, msg...)
	return append(out, s.mac(msg)...), nil
}

var errMAC = &ucs.Error{Op: "share: open sealed", Err: ErrSeal, Reason: "HMAC-SHA256 mismatch (another secret, or altered bytes)"}

func (s *hmacSealer) Open(sealed []byte) ([]byte, error) {
	if len(sealed) < sha256.Size {
		return nil, errMAC
	}
	msg := sealed[:len(sealed)-sha256.Size]
	if !hmac.Equal(s.mac(msg), sealed[len(msg):]) {
		return nil, errMAC
	}
	return append([]byte(nil), msg...), nil
}
