//go:build !race

package ucp_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The data path allocates nothing per operation once warm, for a client
// that waits on its own worker (nothing else progresses it): a get that
// stays in flight until the target answers (shared memory emulates it with
// active messages), a put with its flush, and an idle progress. The race
// detector's sync.Pool drops objects on purpose, so this runs without it.
func TestDataPathAllocatesNothing(t *testing.T) {
	s := newStalled(t)
	runWorker(t, s.server)
	local := s.allocate(t, 4096)
	ctx := context.Background()
	ops := map[string]func(){
		"get": func() {
			req, err := getMemAt(local.Range(0, 8), s.target.Address(), s.rkey)
			require.NoError(t, err)
			require.NoError(t, req.Wait(ctx))
		},
		"put and flush": func() {
			req, err := putMemAt(local.Range(0, 8), s.target.Address(), s.rkey)
			require.NoError(t, err)
			require.NoError(t, req.Wait(ctx))
			require.NoError(t, s.ep.Flush(ctx))
		},
		"progress": func() { s.client.Progress() },
	}
	for name, op := range ops {
		op() // warm: wire-up, pools
		// At most one allocation in ten runs: the collector may empty the
		// request pool between two operations.
		assert.LessOrEqual(t, testing.AllocsPerRun(200, op), 0.1, name)
	}
}
