// Package demo holds what the exporter and importer examples share: the
// data pattern they verify, the -mode flag and the sealing secret.
package demo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/ucxgo/ucx/share"
)

// The seeds of the two regions' patterns: the exporter fills "data" with
// DataSeed, the importer writes InboxSeed into "inbox".
const (
	DataSeed  = 1
	InboxSeed = 2
)

// word is the 8 pattern bytes of block n (splitmix64 of seed and n), so
// that any offset can be generated or checked on its own.
func word(seed, n uint64) uint64 {
	z := seed ^ (n+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// at is the pattern byte of seed at position pos.
func at(seed, pos uint64) byte { return byte(word(seed, pos/8) >> (8 * (pos % 8))) }

// FillAt writes the pattern of seed for positions [off, off+len(b)).
func FillAt(b []byte, seed uint64, off int) {
	for i := 0; i < len(b); {
		pos := uint64(off + i)
		if pos%8 == 0 && len(b)-i >= 8 {
			binary.LittleEndian.PutUint64(b[i:], word(seed, pos/8))
			i += 8
			continue
		}
		b[i] = at(seed, pos)
		i++
	}
}

// Fill writes the pattern of seed into b: position dependent, so a shifted
// or partial copy does not verify.
func Fill(b []byte, seed uint64) { FillAt(b, seed, 0) }

// Verify reports the first byte of b that differs from the pattern of seed.
func Verify(b []byte, seed uint64) error {
	for i := 0; i < len(b); i++ {
		if i%8 == 0 && len(b)-i >= 8 && binary.LittleEndian.Uint64(b[i:]) == word(seed, uint64(i/8)) {
			i += 7
			continue
		}
		if want := at(seed, uint64(i)); b[i] != want {
			return fmt.Errorf("byte %d is %#02x, pattern %d has %#02x", i, b[i], seed, want)
		}
	}
	return nil
}

// ParseMode parses a -mode flag: auto, export or rkey.
func ParseMode(s string) (share.Mode, error) {
	for _, m := range []share.Mode{share.ModeAuto, share.ModeExport, share.ModeRkey} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown -mode %q (auto, export or rkey)", s)
}

// Sealer makes the sealer of the secret given as -key or -key-file (at
// least share.MinSecret bytes; a file's bytes are used as they are). Its
// errors never quote the secret.
func Sealer(key, file string) (share.Sealer, error) {
	var secret []byte
	switch {
	case key != "" && file != "":
		return nil, errors.New("give -key or -key-file, not both")
	case key != "":
		secret = []byte(key)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		secret = b
	default:
		return nil, fmt.Errorf("a sealing secret of at least %d bytes is required (-key-file, or -key)", share.MinSecret)
	}
	return share.NewHMACSealer(secret)
}
