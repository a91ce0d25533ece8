package envelope

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var secret = []byte("test secret")

func sample(t *testing.T) (*Envelope, []byte) {
	now := time.Unix(1_800_000_000, 0)
	e := &Envelope{UCXMajor: 1, UCXMinor: 18, UCXPatch: 1, Address: 0x7f00_0000_1000, Length: 1 << 20,
		Prot: 0x303, Mode: ModeRkey, Issued: now, Expires: now.Add(time.Minute), Key: bytes.Repeat([]byte{7}, 25)}
	copy(e.ExporterID[:], "exporter-0000001")
	b, err := Seal(e, secret)
	require.NoError(t, err)
	return e, b
}

func TestRoundTrip(t *testing.T) {
	e, b := sample(t)
	got, err := Open(b, secret, e.Issued.Add(time.Second))
	require.NoError(t, err)
	assert.Equal(t, e.Address, got.Address)
	assert.Equal(t, e.Key, got.Key)
	assert.Equal(t, e.ExporterID, got.ExporterID)
	assert.True(t, e.Expires.Equal(got.Expires))
	assert.Equal(t, ModeRkey, got.Mode)
}

func TestDistinctFailures(t *testing.T) {
	e, b := sample(t)
	now := e.Issued
	mut := func(f func(c []byte)) []byte { c := bytes.Clone(b); f(c); return c }
	for name, tc := range map[string]struct {
		b   []byte
		key []byte
		at  time.Time
		err error
	}{
		"magic":   {mut(func(c []byte) { c[0] = 'X' }), secret, now, ErrMagic},
		"version": {mut(func(c []byte) { c[8] = 2 }), secret, now, ErrVersion},
		"hmac":    {mut(func(c []byte) { c[40] ^= 1 }), secret, now, ErrMAC},
		"key":     {b, []byte("other secret"), now, ErrMAC},
		"expired": {b, secret, e.Expires, ErrExpired},
		"longer":  {append(bytes.Clone(b), 0), secret, now, ErrMalformed},
	} {
		_, err := Open(tc.b, tc.key, tc.at)
		require.ErrorIs(t, err, tc.err, name)
	}
}

func TestEveryTruncationRefused(t *testing.T) {
	e, b := sample(t)
	for n := range len(b) {
		_, err := Open(b[:n], secret, e.Issued)
		require.Error(t, err, "truncated to %d", n)
		if n >= len(Magic) {
			assert.True(t, errors.Is(err, ErrTruncated) || errors.Is(err, ErrMAC), "truncated to %d: %v", n, err)
		}
	}
}

func TestEveryBitFlipRefused(t *testing.T) {
	e, b := sample(t)
	for i := range len(b) * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		_, err := Open(c, secret, e.Issued)
		require.Error(t, err, "bit %d flipped", i)
	}
}
