package uct_test

import (
	"os"
	"testing"

	"github.com/ucxgo/ucx/internal/leakcheck"
)

// TestMain fails the run if any UCX object is still held once every test
// has closed what it opened.
func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }
