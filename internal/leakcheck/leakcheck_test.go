package leakcheck

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeT records what Goroutines reports instead of failing this test.
type fakeT struct {
	cleanups []func()
	errors   []string
}

func (f *fakeT) Helper()                   {}
func (f *fakeT) Cleanup(fn func())         { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(s string, a ...any) { f.errors = append(f.errors, fmt.Sprintf(s, a...)) }
func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func leakyGoroutine(stop chan struct{}) { <-stop }

func TestGoroutinesReportsLeftoverWithItsStack(t *testing.T) {
	defer func(d time.Duration) { TestTimeout = d }(TestTimeout)
	TestTimeout = 200 * time.Millisecond
	stop := make(chan struct{})
	defer close(stop)
	ft := &fakeT{}
	Goroutines(ft)
	go leakyGoroutine(stop)
	ft.end()
	require.Len(t, ft.errors, 1)
	assert.Contains(t, ft.errors[0], "1 goroutine(s) still running after the test")
	assert.Contains(t, ft.errors[0], "leakcheck.leakyGoroutine", "the stack names the function")
	assert.Contains(t, ft.errors[0], "[chan receive]")
}

// A goroutine that ends a little after the test (a worker loop seeing its
// context cancelled) is waited for, not reported.
func TestGoroutinesWaitsForSlowExit(t *testing.T) {
	ft := &fakeT{}
	Goroutines(ft)
	stop := make(chan struct{})
	go leakyGoroutine(stop)
	time.AfterFunc(50*time.Millisecond, func() { close(stop) })
	ft.end()
	assert.Empty(t, ft.errors)
}

func TestGoroutinesIgnoresOlderGoroutines(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	go leakyGoroutine(stop)
	ft := &fakeT{}
	Goroutines(ft)
	ft.end()
	assert.Empty(t, ft.errors)
}

func TestRunFailsOnLeftoverGoroutine(t *testing.T) {
	defer func(d time.Duration) { SuiteTimeout = d }(SuiteTimeout)
	SuiteTimeout = 200 * time.Millisecond
	var report strings.Builder
	defer func(w io.Writer) { output = w }(output)
	output = &report
	stop := make(chan struct{})
	defer close(stop)
	code := Run(runFunc(func() int { go leakyGoroutine(stop); return 0 }))
	assert.Equal(t, 1, code)
	assert.Contains(t, report.String(), "FAIL: 1 goroutine(s) still running after the suite:")
	assert.Contains(t, report.String(), "leakcheck.leakyGoroutine")
	assert.Equal(t, 0, Run(runFunc(func() int { return 0 })))
	assert.Equal(t, 3, Run(runFunc(func() int { return 3 })), "a failing run keeps its code")
}

type runFunc func() int

func (f runFunc) Run() int { return f() }

func TestParse(t *testing.T) {
	g, ok := parse("goroutine 42 [select, 3 minutes]:\n" +
		"github.com/ucxgo/ucx/ucp.(*Worker).waitFor(0xc000010000, {0x1, 0x2}, 0x0)\n" +
		"\t/work/ucp/worker.go:300 +0x1\n" +
		"main.main.func1()\n" +
		"\t/work/main.go:10 +0x2\n" +
		"created by main.main in goroutine 1\n" +
		"\t/work/main.go:9 +0x3")
	require.True(t, ok)
	assert.Equal(t, int64(42), g.id)
	assert.Equal(t, "select", g.state)
	assert.Equal(t, []string{"github.com/ucxgo/ucx/ucp.(*Worker).waitFor", "main.main.func1", "main.main"}, g.funcs)
	assert.True(t, g.has("main.main"))
	assert.False(t, g.has("main.mai"))
	_, ok = parse("not a goroutine")
	assert.False(t, ok)
}

func TestSnapshotSeesThisGoroutineFirst(t *testing.T) {
	gs := snapshot()
	require.NotEmpty(t, gs)
	assert.True(t, gs[0].current)
	assert.True(t, strings.Contains(gs[0].stack, "TestSnapshotSeesThisGoroutineFirst"))
}
