package ucp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLiveImportsConflicts(t *testing.T) {
	var l liveImports
	d := func(exporter, reg, addr, n uint64) *Descriptor {
		return &Descriptor{contextUUID: exporter, regID: reg, address: addr, length: n}
	}
	first := l.add(d(1, 10, 0x1000, 0x1000))
	for _, tc := range []struct {
		name     string
		d        *Descriptor
		conflict bool
	}{
		{"the same registration again", d(1, 10, 0x1000, 0x1000), false},
		{"a part of it, same registration", d(1, 10, 0x1800, 0x10), false},
		{"registered again", d(1, 11, 0x1000, 0x1000), true},
		{"a part of it, registered again", d(1, 11, 0x1800, 0x10), true},
		{"overlapping its end", d(1, 11, 0x1ff0, 0x100), true},
		{"right after it", d(1, 11, 0x2000, 0x100), false},
		{"in its last 16 bytes' alignment", d(1, 11, 0x1fff+1-8, 4), true},
		{"sharing its aligned end", d(1, 11, 0x2008, 8), false},
		{"another exporter", d(2, 11, 0x1000, 0x1000), false},
		{"a wrapping range", d(1, 11, 0xffff_ffff_ffff_fff0, 0x100), false},
		{"a wrapping range from below", d(1, 11, 0x0800, ^uint64(0)), true},
	} {
		assert.Equal(t, tc.conflict, l.conflict(tc.d) != nil, tc.name)
	}
	first.unmapped()
	assert.Nil(t, l.conflict(d(1, 11, 0x1000, 0x1000)), "after the first is unmapped")
	assert.Empty(t, l.byExporter)
	var nothing *liveImport
	require.NotPanics(t, nothing.unmapped)
}
