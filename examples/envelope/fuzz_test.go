package envelope

import (
	"testing"
	"time"
)

// FuzzOpen: no input crashes Open, and whatever it accepts re-seals to the
// same bytes (nothing is accepted that the format does not describe).
func FuzzOpen(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	e := &Envelope{Address: 1, Length: 2, Mode: ModeRkey, Issued: now, Expires: now.Add(time.Hour), Key: []byte{1, 2, 3}}
	good, _ := Seal(e, secret)
	f.Add(good)
	f.Add([]byte(Magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Open(b, secret, now)
		if err != nil {
			return
		}
		again, err := Seal(got, secret)
		if err != nil || string(again) != string(b) {
			t.Fatalf("accepted bytes that do not re-seal identically: %x", b)
		}
	})
}
