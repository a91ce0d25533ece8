package share_test

import (
	"os"
	"testing"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
)

// TestMain runs a child role when a multi-process test started this
// binary as one; otherwise it fails the run if UCX handles or goroutines
// outlive the tests.
func TestMain(m *testing.M) {
	testproc.Main()
	os.Exit(leakcheck.Run(m))
}
