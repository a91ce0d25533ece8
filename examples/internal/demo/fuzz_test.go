package demo

import (
	"bytes"
	"testing"
)

// FuzzParseVerifyHeader: no header crashes the parser, and what it accepts
// is exactly what VerifyHeader encodes (the exporter decodes these bytes
// from any importer).
func FuzzParseVerifyHeader(f *testing.F) {
	f.Add(VerifyHeader(2, 64<<20))
	f.Add(VerifyHeader(0, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, h []byte) {
		seed, n, err := ParseVerifyHeader(h)
		if err != nil {
			if len(h) == 16 {
				t.Fatalf("a 16-byte header was refused: %v", err)
			}
			return
		}
		if !bytes.Equal(VerifyHeader(seed, n), h) {
			t.Fatalf("accepted %x, which does not re-encode to itself", h)
		}
	})
}
