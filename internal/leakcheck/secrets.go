package leakcheck

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// SecretWindow is the length of the runs of a secret Exposed looks for
// besides the whole: long enough that chance matches of varied bytes do not
// happen, short enough to catch a truncated dump.
const SecretWindow = 16

// Exposed reports where text shows secret (a descriptor, rkey, envelope or
// key) in one of the forms a program could print it: raw, hex (either case,
// with or without spaces), base64 (standard or URL), Go's %v and %q of a
// byte slice. It looks for the whole secret and for every SecretWindow-byte
// run of it with at least four distinct byte values (runs of zeros and the
// like prove nothing). It returns "" when none is found.
func Exposed(text string, secret []byte) string {
	if len(secret) == 0 {
		return ""
	}
	lower := strings.ToLower(text)
	check := func(p []byte, off int) string {
		what := "the whole secret"
		if len(p) < len(secret) {
			what = fmt.Sprintf("bytes %d..%d of the secret", off, off+len(p))
		}
		forms := []struct{ name, s, in string }{
			{"raw", string(p), text},
			{"hex", hex.EncodeToString(p), lower},
			{"spaced hex", fmt.Sprintf("% x", p), lower},
			{"Go %v", strings.Trim(fmt.Sprint(p), "[]"), text},
			{"Go %q", strings.Trim(fmt.Sprintf("%q", p), `"`), text},
		}
		// base64 of a run matches the encoding of the whole only where the
		// run starts on a 3-byte group, and only for its complete groups.
		if off%3 == 0 {
			full := 4 * (len(p) / 3)
			if len(p) == len(secret) {
				full = len(base64.RawStdEncoding.EncodeToString(p))
			}
			forms = append(forms,
				struct{ name, s, in string }{"base64", base64.RawStdEncoding.EncodeToString(p)[:full], text},
				struct{ name, s, in string }{"base64url", base64.RawURLEncoding.EncodeToString(p)[:full], text})
		}
		for _, f := range forms {
			if len(f.s) >= 8 && strings.Contains(f.in, f.s) {
				return fmt.Sprintf("%s as %s", what, f.name)
			}
		}
		return ""
	}
	if found := check(secret, 0); found != "" {
		return found
	}
	for i := 0; i+SecretWindow <= len(secret); i++ {
		if w := secret[i : i+SecretWindow]; distinct(w) >= 4 {
			if found := check(w, i); found != "" {
				return found
			}
		}
	}
	return ""
}

func distinct(b []byte) int {
	var seen [256]bool
	n := 0
	for _, c := range b {
		if !seen[c] {
			seen[c], n = true, n+1
		}
	}
	return n
}

// FindExposed is Exposed over several named secrets; it returns one line
// per secret exposed, naming it and the form found.
func FindExposed(text string, secrets map[string][]byte) []string {
	var found []string
	for name, s := range secrets {
		if form := Exposed(text, s); form != "" {
			found = append(found, name+": "+form)
		}
	}
	sort.Strings(found)
	return found
}
