package ucp

import (
	"time"

	"github.com/ucxgo/ucx/internal/handle"
)

// SetHandshakeCloseLimit sets how long an endpoint CloseForce left to its
// worker waits for its handshake (handshakeCloseLimit), for the external
// tests; it returns the restore.
func SetHandshakeCloseLimit(d time.Duration) (restore func()) {
	old := handshakeCloseLimit
	handshakeCloseLimit = d
	return func() { handshakeCloseLimit = old }
}

// SettleHandles waits, up to limit, until no endpoint is left to its worker
// for its handshake (see waitHandshakeBeforeForce) and the number of live
// handles has not changed for 200 ms: what earlier tests left to their
// workers is released by then. It returns that number.
func SettleHandles(limit time.Duration) int64 {
	deadline := time.Now().Add(limit)
	n, since := handle.Live(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if m := handle.Live(); m != n || handshakesLeft.Load() > 0 {
			n, since = m, time.Now()
			continue
		}
		if time.Since(since) >= 200*time.Millisecond {
			break
		}
	}
	return n
}
