package ucp

import "time"

// SetDrainTimeout shortens how long closed workers are drained, so that
// tests of requests that never complete see the give-up in seconds; the
// returned function restores the default.
func SetDrainTimeout(d time.Duration) (restore func()) {
	drainTimeoutForTests.Store(int64(d))
	return func() { drainTimeoutForTests.Store(0) }
}
