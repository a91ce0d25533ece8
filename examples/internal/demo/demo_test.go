package demo

import "testing"

func TestPattern(t *testing.T) {
	b := make([]byte, 1000)
	Fill(b, 7)
	if err := Verify(b, 7); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 100)
	FillAt(part, 7, 333)
	for i := range part {
		if part[i] != b[333+i] {
			t.Fatalf("FillAt differs at %d", i)
		}
	}
	if Verify(b, 8) == nil {
		t.Fatal("another seed verifies")
	}
	b[999] ^= 1
	if Verify(b, 7) == nil {
		t.Fatal("a flipped byte verifies")
	}
}
