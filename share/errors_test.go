package share_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

// TestNewcomerErrorsOneNamespace: a program on share tells every condition
// it meets apart with share's names alone, one errors.Is each.
func TestNewcomerErrorsOneNamespace(t *testing.T) {
	m := memory(t, pattern(4096, 1))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", m, share.ReadOnly))
	assert.ErrorIs(t, e.Add(context.Background(), "a", m, share.ReadOnly), share.ErrExists)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.Remove(ctx, "nope")
	assert.ErrorIs(t, err, share.ErrNoRegion)
	assert.ErrorIs(t, m.Close(), share.ErrBusy, "shared memory cannot be closed")

	imp := dial(t, addr)
	_, err = imp.Region("nope")
	assert.ErrorIs(t, err, share.ErrNoRegion)
	r, err := imp.Region("a")
	require.NoError(t, err)
	_, err = r.ReadAt(make([]byte, 8), -1)
	assert.ErrorIs(t, err, share.ErrOutOfRange)
	_, err = r.WriteAt(make([]byte, 8), 0)
	assert.ErrorIs(t, err, share.ErrAccess, "a read-only grant refuses writes")
	done, stop := context.WithCancel(context.Background())
	stop()
	_, err = r.ReadAtContext(done, make([]byte, 8), 0)
	assert.ErrorIs(t, err, share.ErrCanceled)
	_, err = imp.NewBuffer(-1)
	assert.ErrorIs(t, err, share.ErrInvalid)
	require.NoError(t, imp.Close())
	_, err = r.ReadAt(make([]byte, 8), 0)
	assert.ErrorIs(t, err, share.ErrClosed)

	// The same values as ucs's: code written against either name works.
	assert.True(t, errors.Is(err, ucs.ErrClosed))
	for _, pair := range [][2]error{{share.ErrTimedOut, ucs.ErrTimedOut}, {share.ErrNoRegion, ucs.ErrNoElem}, {share.ErrReset, ucs.ErrConnectionReset}} {
		assert.Equal(t, pair[1], pair[0])
	}
}
