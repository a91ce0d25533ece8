package testproc

import (
	"context"
	"iter"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The round-count knobs. A test's own count is the fewest rounds that
// prove its point in make test (each test says why its count is what it
// is); the same test with more rounds is the stress run.
const (
	// StressEnv is a duration (make stress's share of STRESS_TIME for one
	// test): every round loop runs at least its own count and then goes on
	// until that long has passed since the loop started.
	StressEnv = "UCXGO_STRESS"
	// RoundsEnv is a count that replaces every round loop's own (for a
	// measured run, such as UCXGO_ROUNDS=20).
	RoundsEnv = "UCXGO_ROUNDS"
)

// Stress is the stress duration of make stress, 0 outside it.
func Stress() time.Duration {
	d, err := time.ParseDuration(os.Getenv(StressEnv))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// Count is n, or the count RoundsEnv gives.
func Count(n int) int {
	if v, err := strconv.Atoi(os.Getenv(RoundsEnv)); err == nil && v > 0 {
		return v
	}
	return n
}

// Rounds yields 0, 1, ...: Count(n) rounds, and under make stress more,
// until the stress duration has passed (at least Count(n)).
func Rounds(n int) iter.Seq[int] {
	n = Count(n)
	stress := Stress()
	return func(yield func(int) bool) {
		end := time.Now().Add(stress)
		for i := 0; i < n || time.Now().Before(end); i++ {
			if !yield(i) {
				return
			}
		}
	}
}

// itersEnv carries RunRounds' iterations to its child.
const itersEnv = "UCXGO_TEST_ITERS"

// RunRounds runs the test named (a test of this binary whose body is
// RepeatInChild) in child processes, Rounds(rounds) of them, each
// repeating the body iters times, so that a crash one run in a few fails
// the round that met it instead of the whole test binary. In a child it
// does nothing.
func RunRounds(t *testing.T, name string, rounds, iters int) {
	t.Helper()
	if os.Getenv(itersEnv) != "" {
		return
	}
	deadline := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-10 * time.Second)
	}
	n := 0
	for i := range Rounds(rounds) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		out, err := Run(ctx, Spec{Test: name, Env: []string{itersEnv + "=" + strconv.Itoa(iters)}})
		cancel()
		if err != nil {
			t.Fatalf("round %d of %s: %v:\n%s", i, name, err, tail(out))
		}
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Fatalf("round %d of %s ran nothing:\n%s", i, name, tail(out))
		}
		n++
	}
	t.Logf("%d rounds of %d", n, iters)
}

// RepeatInChild runs body as subtests, as many as RunRounds asked for, in
// RunRounds' child process; elsewhere it skips.
func RepeatInChild(t *testing.T, body func(t *testing.T)) {
	iters, err := strconv.Atoi(os.Getenv(itersEnv))
	if err != nil {
		t.Skip("a round run in a child process by RunRounds")
	}
	for i := range iters {
		if !t.Run(strconv.Itoa(i), body) {
			return
		}
	}
}

// tail is out, shortened from the middle past 32 KiB.
func tail(out []byte) string {
	const max = 32 << 10
	if len(out) > max {
		return string(out[:max/4]) + "\n[...]\n" + string(out[len(out)-3*max/4:])
	}
	return string(out)
}
