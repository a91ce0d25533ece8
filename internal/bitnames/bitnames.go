// Package bitnames names the bits of UCX flag sets, for String and JSON.
package bitnames

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Names names each set bit of v; a bit without a name prints as unknown
// followed by its number (e.g. "bit14").
func Names(v uint64, names []string, unknown string) []string {
	out := []string{}
	for v != 0 {
		b := bits.TrailingZeros64(v)
		v &^= 1 << b
		if b < len(names) {
			out = append(out, names[b])
		} else {
			out = append(out, unknown+strconv.Itoa(b))
		}
	}
	return out
}

// Marshal writes the set bits of v as a JSON list of names.
func Marshal(v uint64, names []string, unknown string) ([]byte, error) {
	return json.Marshal(Names(v, names, unknown))
}

// Unmarshal reads the list Marshal writes.
func Unmarshal(b []byte, names []string, unknown string) (uint64, error) {
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, err
	}
	var v uint64
next:
	for _, name := range list {
		for i, n := range names {
			if n == name {
				v |= 1 << i
				continue next
			}
		}
		bit, err := strconv.Atoi(strings.TrimPrefix(name, unknown))
		if err != nil || !strings.HasPrefix(name, unknown) || bit < 0 || bit > 63 {
			return 0, fmt.Errorf("unknown flag name %q", name)
		}
		v |= 1 << bit
	}
	return v, nil
}
