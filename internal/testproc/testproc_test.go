package testproc_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
)

func init() {
	// echo prints its arguments and environment markers, then echoes its
	// stdin line by line until stdin closes; "exit N" ends it with code N.
	testproc.Role("echo", func() int {
		fmt.Println("ARGS", strings.Join(os.Args[2:], " "))
		fmt.Printf("ENV role=%q gorace=%q extra=%q\n", os.Getenv(testproc.RoleEnv), os.Getenv("GORACE"), os.Getenv("TESTPROC_EXTRA"))
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			var code int
			if _, err := fmt.Sscanf(in.Text(), "exit %d", &code); err == nil {
				return code
			}
			fmt.Println("ECHO", in.Text())
		}
		return 0
	})
	testproc.Role("results", func() int {
		fd3 := os.NewFile(3, "results")
		fmt.Println("noise on stdout")
		fmt.Fprintln(fd3, "RESULT one")
		fmt.Fprintln(fd3, "RESULT two")
		return 0
	})
}

func TestMain(m *testing.M) {
	testproc.Main()
	os.Exit(m.Run())
}

func TestRoleLinesStdinAndExit(t *testing.T) {
	p := testproc.Start(t, testproc.Spec{Role: "echo", Args: []string{"-a", "b"}, Env: []string{"TESTPROC_EXTRA=x"}})
	assert.Equal(t, "-a b", p.WaitLine(t, "ARGS", 30*time.Second))
	env := p.WaitLine(t, "ENV", 30*time.Second)
	assert.Contains(t, env, `role="echo"`)
	assert.Contains(t, env, `atexit_sleep_ms=50`)
	assert.Contains(t, env, `extra="x"`)
	fmt.Fprintln(p.Stdin(), "hello")
	assert.Equal(t, "hello", p.WaitLine(t, "ECHO", 30*time.Second))
	fmt.Fprintln(p.Stdin(), "exit 3")
	assert.Equal(t, 3, p.Wait(t, 30*time.Second))
	l, ok := p.Line(time.Second)
	assert.False(t, ok, "no line after the end, got %q", l)
	assert.Contains(t, p.Output(), "ECHO hello")
}

// A line that never comes is a timeout, told apart from the child's end.
func TestLineTimeoutAndEnd(t *testing.T) {
	p := testproc.Start(t, testproc.Spec{Role: "echo"})
	p.WaitLine(t, "ENV", 30*time.Second)
	_, ok := p.Line(100 * time.Millisecond)
	assert.False(t, ok)
	select {
	case <-p.Done():
		t.Fatal("the child ended on a Line timeout")
	default:
	}
	p.CloseStdin()
	_, ok = p.NextLine(t, 30*time.Second)
	assert.False(t, ok, "the end of the child's lines")
	<-p.Done()
}

func TestResultsFD(t *testing.T) {
	p := testproc.Start(t, testproc.Spec{Role: "results", ResultsFD: true})
	assert.Equal(t, "one", p.WaitLine(t, "RESULT", 30*time.Second))
	assert.Equal(t, "two", p.WaitLine(t, "RESULT", 30*time.Second))
	assert.Equal(t, 0, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Output(), "noise on stdout")
	assert.NotContains(t, p.Output(), "RESULT")
}

// A role's child does not inherit the role: it is this binary again, run
// as what its own Spec says.
func TestRoleNotInherited(t *testing.T) {
	t.Setenv(testproc.RoleEnv, "results")
	out, err := testproc.Run(context.Background(), testproc.Spec{Argv: []string{"sh", "-c", "echo role=$" + testproc.RoleEnv}})
	require.NoError(t, err)
	assert.Equal(t, "role=\n", string(out))
}

func TestRoundsCountAndStress(t *testing.T) {
	var pause time.Duration
	count := func() int {
		n := 0
		for range testproc.Rounds(3) {
			n++
			time.Sleep(pause)
		}
		return n
	}
	assert.Equal(t, 3, count())
	t.Setenv(testproc.RoundsEnv, "5")
	assert.Equal(t, 5, count())
	t.Setenv(testproc.RoundsEnv, "")
	t.Setenv(testproc.StressEnv, "500ms")
	pause = 50 * time.Millisecond
	assert.Greater(t, count(), 3, "stress rounds go on for the stress time, past the count")
}
