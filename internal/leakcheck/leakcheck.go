// Package leakcheck makes a test binary fail when UCX handles or goroutines
// outlive its tests, and offers the goroutine check per test.
package leakcheck

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/ucxgo/ucx/internal/handle"
)

// Run runs the tests and turns a passing run into a failure if any UCX
// handle is still live afterwards (after giving cleanups a chance to run),
// or if a goroutine started during the run is still running a few seconds
// after the last test (its stack is printed).
func Run(m interface{ Run() int }) int {
	before := snapshot()
	code := m.Run()
	if code != 0 {
		return code
	}
	deadline := time.Now().Add(10 * time.Second)
	for handle.Live() != 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := handle.Live(); n != 0 {
		fmt.Fprintf(output, "FAIL: %d UCX handles still live after the suite\n", n)
		return 1
	}
	if left := waitGoroutines(before, SuiteTimeout); len(left) > 0 {
		fmt.Fprintf(output, "FAIL: %s\n", describe(left, "the suite"))
		return 1
	}
	return 0
}

// output receives Run's failure report.
var output io.Writer = os.Stderr

// SuiteTimeout and TestTimeout bound how long the checks wait for
// goroutines to end: goroutines that stop asynchronously (a worker's Run
// returning after its context is cancelled, a process reaper) get that long.
var (
	SuiteTimeout = 5 * time.Second
	TestTimeout  = 5 * time.Second
)

// TB is the part of testing.TB the per-test check uses.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
}

// Goroutines fails t if goroutines started after this call are still
// running once the test and its other cleanups are done (it waits up to
// TestTimeout for them). Call it first in the test, so that its cleanup runs
// last; not for tests that run in parallel with others, whose goroutines it
// would count.
func Goroutines(t TB) {
	t.Helper()
	before := snapshot()
	t.Cleanup(func() {
		if left := waitGoroutines(before, TestTimeout); len(left) > 0 {
			t.Errorf("leakcheck: %s", describe(left, "the test"))
		}
	})
}

// waitGoroutines waits until every goroutine not in before, other than the
// caller and the runtime's and testing's own, has ended; it returns those
// still running at the deadline.
func waitGoroutines(before []goroutine, timeout time.Duration) []goroutine {
	known := make(map[int64]bool, len(before))
	for _, g := range before {
		known[g.id] = true
	}
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		var left []goroutine
		for _, g := range snapshot() {
			if !known[g.id] && !g.current && !standard(g) {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(delay)
	}
}

func describe(left []goroutine, after string) string {
	s := fmt.Sprintf("%d goroutine(s) still running after %s:", len(left), after)
	for _, g := range left {
		s += "\n\n" + g.stack
	}
	return s
}
