package share

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ucxgo/ucx/ucs"
)

// The pairs measured in docs/behaviour.md: the same minor always talks;
// 1.20 with another minor and 1.22+ with 1.21 or older are refused, with
// both releases named.
func TestCompatiblePairs(t *testing.T) {
	v := func(minor, patch uint) ucs.Version { return ucs.Version{Major: 1, Minor: minor, Patch: patch} }
	for _, c := range []struct {
		exp, imp ucs.Version
		ok       bool
	}{
		{v(18, 0), v(19, 1), true},
		{v(18, 1), v(18, 0), true},
		{v(16, 0), v(21, 0), true},
		{v(20, 1), v(20, 1), true},
		{v(22, 0), v(23, 0), true},
		{v(20, 1), v(19, 1), false},
		{v(19, 1), v(20, 1), false},
		{v(22, 0), v(21, 0), false},
		{v(16, 0), v(22, 0), false},
		{v(15, 0), v(15, 0), false},
	} {
		err := compatible(c.exp, c.imp)
		if c.ok {
			assert.NoError(t, err, "%s / %s", c.exp, c.imp)
			continue
		}
		if assert.Error(t, err, "%s / %s", c.exp, c.imp) {
			assert.True(t, errors.Is(err, ErrRefused))
			assert.Contains(t, err.Error(), "exporter on UCX "+c.exp.String())
			assert.Contains(t, err.Error(), "importer on UCX "+c.imp.String())
		}
	}
}
