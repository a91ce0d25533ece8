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
	err := StatusError(ErrNoMemory, "uct: allocate %d bytes", 8)
	require.ErrorIs(t, err, ErrNoMemory)
	assert.NotErrorIs(t, err, ErrUnsupported)
	assert.Equal(t, "uct: allocate 8 bytes: Out of memory", err.Error())
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, ErrNoMemory, e.Status())
	assert.NoError(t, StatusError(OK, "nothing"))

	wrapped := fmt.Errorf("service: %w", Errorf("uct: export mkey on md \"tcp\"", ErrUnsupported, "md lacks %s", "UCT_MD_FLAG_EXPORTED_MKEY"))
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
	require.NoError(t, CheckVersion(), "this binary runs against the UCX it was built for")
	require.NoError(t, checkVersions(v(1, 18, 1), v(1, 18, 0)), "patch releases may differ")
	err := checkVersions(v(1, 18, 1), v(1, 23, 0))
	require.ErrorIs(t, err, ErrVersionMismatch)
	assert.Contains(t, err.Error(), "built against UCX 1.18.1 but the loaded libucx is 1.23.0")
	require.ErrorIs(t, checkVersions(v(1, 23, 0), v(2, 23, 0)), ErrVersionMismatch)
}

func v(major, minor, patch uint) Version { return Version{Major: major, Minor: minor, Patch: patch} }
