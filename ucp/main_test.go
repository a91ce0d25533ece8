package ucp_test

import (
	"os"
	"testing"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
)

// TestMain doubles as the child process of the two-process tests and fails
// the run if UCX handles are still live once every test closed its own.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	testproc.Main()
	os.Exit(leakcheck.Run(m))
}
