// Package demo holds what the exporter and importer examples share: the
// active-message protocol between them and the data pattern they verify.
package demo

import (
	"encoding/binary"
	"fmt"
)

// Active-message ids of the exporter/importer protocol.
const (
	AMEnvelope = 11 // exporter -> importer: data = sealed envelope
	AMVerify   = 12 // importer -> exporter (reply flag): header = seed u64, length u64
	AMResult   = 13 // exporter -> importer: header = 1 (match) or 0, data = message
	AMRevoke   = 14 // exporter -> importer: stop using the key
	AMAck      = 15 // importer -> exporter: key dropped (after a revoke or when done)
)

// word is the 8 pattern bytes of block n (splitmix64 of seed and n), so
// that any offset can be generated or checked on its own.
func word(seed, n uint64) uint64 {
	z := seed ^ (n+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// FillAt writes the pattern of seed for positions [off, off+len(b)).
func FillAt(b []byte, seed uint64, off int) {
	for i := range b {
		pos := uint64(off + i)
		b[i] = byte(word(seed, pos/8) >> (8 * (pos % 8)))
	}
}

// Fill writes the pattern of seed into b: position dependent, so a shifted
// or partial copy does not verify.
func Fill(b []byte, seed uint64) { FillAt(b, seed, 0) }

// Verify reports the first byte of b that differs from the pattern of seed.
func Verify(b []byte, seed uint64) error {
	for i := range b {
		pos := uint64(i)
		if want := byte(word(seed, pos/8) >> (8 * (pos % 8))); b[i] != want {
			return fmt.Errorf("byte %d is %#02x, pattern %d has %#02x", i, b[i], seed, want)
		}
	}
	return nil
}

// VerifyHeader encodes the AMVerify header.
func VerifyHeader(seed, length uint64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, seed), length)
}

// ParseVerifyHeader decodes the AMVerify header.
func ParseVerifyHeader(h []byte) (seed, length uint64, err error) {
	if len(h) != 16 {
		return 0, 0, fmt.Errorf("verify header of %d bytes, want 16", len(h))
	}
	return binary.LittleEndian.Uint64(h), binary.LittleEndian.Uint64(h[8:]), nil
}
