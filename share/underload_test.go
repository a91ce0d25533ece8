package share_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

// Revocations, rotations, removals and closes land while importers stream
// reads and writes, in rounds of child processes so that a crash fails one
// round: nothing may crash, every call ends with its bytes or with an
// error wrapping share.ErrRevoked or ucs.ErrClosed, and every session
// ends with its registrations unmapped. 2 rounds of the 6 actions here (about
// 5 s under -race); make stress runs rounds
// for its budget.
func TestRevokeAndCloseUnderLoad(t *testing.T) {
	testproc.RunRounds(t, "TestRevokeAndCloseUnderLoadOnce", 2, 1)
}

func TestRevokeAndCloseUnderLoadOnce(t *testing.T) {
	testproc.RepeatInChild(t, func(t *testing.T) {
		for cycle := range 6 {
			underLoadCycle(t, cycle%6)
		}
	})
}

func underLoadCycle(t *testing.T, action int) {
	start := time.Now()
	mem := memory(t, pattern(256<<10, byte(action)))
	a := mem.Bytes()
	e, err := share.NewExporter(sealer(t), share.WithAckTimeout(2*time.Second))
	require.NoError(t, err)
	l := listen(t)
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadWrite))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	imp, err := share.Dial(ctx, "tcp", l.Addr().String(), sealer(t), share.WithChunk(32<<10))
	require.NoError(t, err)
	r, err := imp.Region("a")
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, len(a))
			for {
				var err error
				if w == 0 {
					_, err = r.ReadAt(buf, 0)
				} else {
					_, err = r.WriteAt(buf[:64<<10], 4096)
				}
				if err != nil {
					if !errors.Is(err, share.ErrRevoked) && !errors.Is(err, ucs.ErrClosed) {
						errs <- err
					}
					return
				}
			}
		}()
	}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	switch action {
	case 0:
		require.NoError(t, errOf(e.Revoke(ctx)))
	case 1:
		require.NoError(t, imp.Close())
	case 2:
		require.NoError(t, e.Close())
	case 3:
		require.NoError(t, errOf(e.Sessions()[0].Revoke(ctx)))
	case 4:
		require.NoError(t, errOf(e.Rotate(ctx, "a", 50*time.Millisecond)))
		require.NoError(t, errOf(e.Remove(ctx, "a")))
	case 5:
		go imp.Close()
		require.NoError(t, e.Close())
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("action %d: a call failed with neither a revocation nor a close: %v", action, err)
	}
	require.NoError(t, imp.Close())
	require.NoError(t, e.Close())
	require.NoError(t, <-served)
	t.Logf("action %d: %v", action, time.Since(start))
}
