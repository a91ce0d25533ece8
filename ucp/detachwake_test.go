package ucp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// A Wait asleep on a copy of a Request ends when another copy is
// detached, also with a ctx that never ends: the get goes to a target
// nobody progresses, so only the Detach can end the Waits. Once the target
// progresses, the worker releases the detached get.
func TestDetachWakesWaitOnCopy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiters int
	}{{"one-waiter", 1}, {"several-waiters", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			before := ucs.LiveHandles()
			t.Run("", func(t *testing.T) { detachWakesWaiters(t, tc.waiters) })
			waitLive(t, before)
		})
	}
}

func detachWakesWaiters(t *testing.T, waiters int) {
	s := newStalled(t)
	req, err := getAt(make([]byte, 8), s.target.Address(), s.rkey)
	require.NoError(t, err)

	waited := make(chan error, waiters)
	for i := range waiters {
		ctx := context.Background()
		if i%2 == 1 { // a ctx that can end, but not before the test does
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Minute)
			defer cancel()
		}
		go func(r ucp.Request) { waited <- r.Wait(ctx) }(req)
	}
	time.Sleep(150 * time.Millisecond) // the Waits are asleep by now
	select {
	case err := <-waited:
		t.Fatalf("a Wait returned before the Detach: %v", err)
	default:
	}

	detached := time.Now()
	req.Detach()
	deadline := time.After(time.Second)
	for range waiters {
		select {
		case err := <-waited:
			require.ErrorIs(t, err, ucs.ErrCanceled)
			assert.Contains(t, err.Error(), "detached")
		case <-deadline:
			t.Fatalf("a Wait on a copy still sleeps %v after the Detach", time.Since(detached))
		}
	}
	t.Logf("%d Waits returned %v after the Detach", waiters, time.Since(detached))
	assert.False(t, req.Done())
	require.ErrorIs(t, req.Wait(context.Background()), ucs.ErrCanceled)

	// The detached get is the worker's now: it completes once the target
	// progresses, and the flush sees it done.
	s.start(t)
	require.NoError(t, s.ep.Flush(waitCtx(t)))
}
