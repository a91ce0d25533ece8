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

// TestReviewPeerDiesWhileBlocked: the peer, a child process, is killed
// while this side waits in RecvStream on its endpoint and in RecvTag on
// the worker.
func TestReviewPeerDiesWhileBlocked(t *testing.T) {
	for _, tc := range []struct {
		name, tls string
		peerErr   bool
	}{{"tcp-peererr", "tcp", true}, {"tcp-nopeererr", "tcp", false}, {"shm-nopeererr", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{}
			if !tc.peerErr {
				env = append(env, "REVIEW_PEERERR=0")
			}
			_, w, l := listenWorker(t, tc.tls)
			peer := startPeer(t, env, "stream", tc.tls, l.Addr().String())
			ep := acceptCtx(t, l, ucp.WithPeerErrorHandling(tc.peerErr))
			buf := make([]byte, 5)
			n, err := ep.RecvStream(waitCtx(t), buf, ucp.StreamWaitAll)
			require.NoError(t, err)
			require.Equal(t, "hello", string(buf[:n]))
			peer.WaitLine(t, "READY", 10*time.Second)
			type result struct {
				what string
				err  error
				at   time.Time
			}
			results := make(chan result, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			go func() {
				_, err := ep.RecvStream(ctx, make([]byte, 8), 0)
				results <- result{"RecvStream", err, time.Now()}
			}()
			go func() {
				_, err := w.RecvTag(ctx, make([]byte, 8), 1, ^ucp.Tag(0))
				results <- result{"RecvTag", err, time.Now()}
			}()
			time.Sleep(50 * time.Millisecond)
			killed := time.Now()
			peer.Kill()
			peer.WaitDead(t)
			for range 2 {
				r := <-results
				t.Logf("%s returned %v after the kill: %v", r.what, r.at.Sub(killed).Round(time.Millisecond), r.err)
				if r.what == "RecvStream" && tc.peerErr {
					assert.NotErrorIs(t, r.err, ucs.ErrTimedOut)
				}
			}
		})
	}
}
