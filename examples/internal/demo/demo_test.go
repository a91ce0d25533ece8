package demo

import "testing"

func TestPattern(t *testing.T) {
	b := make([]byte, 1000)
	Fill(b, 7)
	if err := Verify(b, 7); err != nil {
		t.Fatal(err)
	}
	for i := range b { // the byte-wise definition
		if b[i] != at(7, uint64(i)) {
			t.Fatalf("Fill differs from the pattern at %d", i)
		}
	}
	for _, off := range []int{0, 3, 333, 992} {
		part := make([]byte, min(100, len(b)-off))
		FillAt(part, 7, off)
		for i := range part {
			if part[i] != b[off+i] {
				t.Fatalf("FillAt(%d) differs at %d", off, i)
			}
		}
	}
	if Verify(b, 8) == nil {
		t.Fatal("another seed verifies")
	}
	for _, i := range []int{0, 5, 8, 998, 999} {
		b[i] ^= 1
		if err := Verify(b, 7); err == nil {
			t.Fatalf("a flipped byte %d verifies", i)
		}
		b[i] ^= 1
	}
	if Verify(b[:13], 7) != nil {
		t.Fatal("a prefix does not verify")
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"auto", "export", "rkey"} {
		if m, err := ParseMode(s); err != nil || m.String() != s {
			t.Fatalf("%s: %v %v", s, m, err)
		}
	}
	if _, err := ParseMode("Rkey"); err == nil {
		t.Fatal("an unknown mode parsed")
	}
}

func TestSealerRefusesShortSecret(t *testing.T) {
	if _, err := Sealer("short", ""); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
	if _, err := Sealer("0123456789abcdef", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := Sealer("", ""); err == nil {
		t.Fatal("no secret was accepted")
	}
}
