package ucp_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ucxgo/ucx/ucs"
)

// TestMain doubles as the child process of the two-process tests and fails
// the run if UCX handles are still live once every test closed its own.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		for ucs.LiveHandles() != 0 && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		if n := ucs.LiveHandles(); n != 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d UCX handles still live after the suite\n", n)
			code = 1
		}
	}
	os.Exit(code)
}
