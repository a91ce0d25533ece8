package ucp_test

import (
	"os"
	"testing"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
)

// TestMain runs the child role a two-process test started this binary as
// (testproc.Main); otherwise it fails the run if UCX handles are still live
// once every test closed its own.
func TestMain(m *testing.M) {
	testproc.Main()
	os.Exit(leakcheck.Run(m))
}
