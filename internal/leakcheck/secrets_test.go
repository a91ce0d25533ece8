package leakcheck

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExposedFindsEveryForm(t *testing.T) {
	secret := make([]byte, 40)
	for i := range secret {
		secret[i] = byte(i*37 + 11)
	}
	run := secret[6:26] // a truncated dump, starting on a 3-byte group
	for name, text := range map[string]string{
		"raw":             "x" + string(secret) + "y",
		"hex":             "key=" + hex.EncodeToString(secret),
		"HEX":             "key=" + strings.ToUpper(hex.EncodeToString(secret)),
		"spaced":          fmt.Sprintf("key: % x", secret),
		"%v":              fmt.Sprintf("key %v", secret),
		"%q":              fmt.Sprintf("key %q", secret),
		"base64":          base64.StdEncoding.EncodeToString(secret),
		"base64url":       base64.URLEncoding.EncodeToString(secret),
		"hex run":         "..." + hex.EncodeToString(run) + "...",
		"base64 of whole": "prefix " + base64.StdEncoding.EncodeToString(secret)[:30],
		"%v run":          fmt.Sprintf("%v", run),
	} {
		assert.NotEmpty(t, Exposed(text, secret), name)
	}
	assert.Contains(t, Exposed(hex.EncodeToString(secret), secret), "the whole secret as hex")
	assert.Contains(t, Exposed(hex.EncodeToString(run), secret), "bytes 6..22 of the secret as hex")
}

func TestExposedIgnoresWhatProvesNothing(t *testing.T) {
	zeros := make([]byte, 64)
	zeros[0] = 1
	assert.Empty(t, Exposed("0000000000000000000000000000000000000000", zeros), "a run of zeros is not the secret")
	secret := []byte("0123456789abcdefghijklmnopqrstuv")
	assert.Empty(t, Exposed("ucp: parse exported descriptor: Invalid parameter: header size 12, want 44", secret))
	assert.Empty(t, Exposed(string(secret[:SecretWindow-1]), secret), "shorter than a window")
	assert.Empty(t, Exposed("anything", nil))
}

func TestFindExposedNamesTheSecret(t *testing.T) {
	a := []byte("the first secret, long enough")
	b := []byte("quite different bytes: 0xCAFE!")
	found := FindExposed("log: "+hex.EncodeToString(b), map[string][]byte{"a": a, "b": b})
	assert.Equal(t, []string{"b: the whole secret as hex"}, found)
}
