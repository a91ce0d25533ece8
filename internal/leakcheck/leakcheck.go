// Package leakcheck makes a test binary fail when UCX handles outlive its
// tests.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/ucxgo/ucx/internal/handle"
)

// Run runs the tests and turns a passing run into a failure if any UCX
// handle is still live afterwards (after giving cleanups a chance to run).
func Run(m interface{ Run() int }) int {
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
		fmt.Fprintf(os.Stderr, "FAIL: %d UCX handles still live after the suite\n", n)
		return 1
	}
	return 0
}
