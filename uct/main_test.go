package uct_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ucxgo/ucx/ucs"
)

// TestMain fails the run if any UCX object is still held once every test
// has closed what it opened.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
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
