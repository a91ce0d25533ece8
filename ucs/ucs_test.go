package ucs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatusStringsComeFromUCX(t *testing.T) {
	assert.Equal(t, "Success", OK.String())
	assert.Equal(t, "Unsupported operation", ErrUnsupported.String())
	assert.Equal(t, "Destination is unreachable", ErrUnreachable.String())
	assert.Equal(t, "Connection reset by remote peer", ErrConnectionReset.String())
}

func TestErrorWrapsStatus(t *testing.T) {
	var err error = &Error{Op: "uct: allocate 8 bytes", Err: ErrNoMemory}
	require.ErrorIs(t, err, ErrNoMemory)
	assert.NotErrorIs(t, err, ErrUnsupported)
	assert.Equal(t, "uct: allocate 8 bytes: Out of memory", err.Error())
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, ErrNoMemory, e.Status())

	wrapped := fmt.Errorf("service: %w", &Error{Op: "uct: export mkey on md \"tcp\"", Err: ErrUnsupported, Reason: "md lacks UCT_MD_FLAG_EXPORTED_MKEY"})
	require.ErrorIs(t, wrapped, ErrUnsupported)
	assert.Equal(t, `service: uct: export mkey on md "tcp": Unsupported operation: md lacks UCT_MD_FLAG_EXPORTED_MKEY`, wrapped.Error())

	closed := &Error{Op: "uct: pack rkey", Err: ErrClosed}
	require.ErrorIs(t, closed, ErrClosed)
	assert.Equal(t, OK, closed.Status())
}

func TestSentinelsAreDistinct(t *testing.T) {
	all := []Status{ErrUnsupported, ErrInvalidParam, ErrNoResource, ErrNoMemory, ErrUnreachable,
		ErrBusy, ErrTimedOut, ErrCanceled, ErrConnectionReset}
	for i, a := range all {
		for j, b := range all {
			assert.Equal(t, i == j, errors.Is(a, b), "%v vs %v", a, b)
		}
	}
	assert.True(t, ErrEndpointTimeout.IsEndpointFailure())
	assert.False(t, ErrIOError.IsLinkFailure())
}

func TestVersionGuard(t *testing.T) {
	require.NoError(t, CheckVersion(), "this binary runs against the loaded UCX %v", LoadedVersion())
	for _, c := range []struct {
		built, loaded Version
		allow         bool
		want          string // "" when accepted
	}{
		{v(1, 18, 1), v(1, 18, 0), false, ""},
		{v(1, 18, 0), v(1, 19, 1), false, ""},
		{v(1, 18, 0), v(1, 20, 1), false, ""},
		{v(1, 22, 0), v(1, 16, 0), false, ""},
		{v(1, 16, 0), v(1, 23, 0), false, ""},
		{v(1, 18, 1), v(1, 15, 0), false, "the loaded libucx is UCX 1.15.0, older than 1.16, the oldest release ucx-go runs on (it was built against 1.18.1)"},
		{v(1, 18, 1), v(1, 13, 1), true, "the loaded libucx is UCX 1.13.1, older than 1.16"},
		{v(1, 23, 0), v(2, 0, 0), true, "the loaded libucx is UCX 2.0.0, not a 1.x release"},
		{v(1, 23, 0), v(1, 24, 0), false, "the loaded libucx is UCX 1.24.0, newer than 1.23, the newest release verified (ucx-go was built against 1.23.0); rebuild with -tags ucxgo_unverified_ucx"},
		{v(1, 23, 0), v(1, 24, 0), true, ""},
	} {
		err := checkVersions(c.built, c.loaded, c.allow)
		if c.want == "" {
			assert.NoError(t, err, "built %v, loaded %v", c.built, c.loaded)
			continue
		}
		require.ErrorIs(t, err, ErrUnsupportedRelease, "built %v, loaded %v", c.built, c.loaded)
		assert.Contains(t, err.Error(), c.want)
	}
	assert.Equal(t, "1.19.1", v(1, 19, 1).String())
}

func v(major, minor, patch uint) Version { return Version{Major: major, Minor: minor, Patch: patch} }

// Kinds and memory types print a name, and a value out of range prints
// its number instead of panicking (a peer's byte can be any value).
func TestKindAndTypeNames(t *testing.T) {
	assert.Equal(t, "allocated", MemAllocated.String())
	assert.Equal(t, "registered", MemRegistered.String())
	assert.Equal(t, "imported", MemImported.String())
	assert.Equal(t, "MemKind(200)", MemKind(200).String())
	assert.Equal(t, "cuda", MemoryCUDA.String())
	assert.Equal(t, "type77", MemoryType(77).String())
	assert.False(t, MemoryTypes(1).Has(MemoryType(200)))
	assert.Equal(t, "host,cuda", MemoryTypes(3).String())
}
