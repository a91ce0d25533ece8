// Package testproc is the test suites' one harness for other processes and
// for round counts: a test binary re-executed as a named role (Role, Main,
// Start), another program started and read line by line (Start with Argv),
// a test run in a child process so that a crash fails a round instead of
// the whole binary (RunRounds, RepeatInChild, Run), and the round count
// every repeated test takes from one knob (Rounds: a few rounds in make
// test, rounds for a time budget in make stress).
package testproc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RoleEnv names the role a re-executed test binary plays (Main reads it).
const RoleEnv = "UCXGO_TEST_ROLE"

var roles = map[string]func() int{}

// Role registers a role of this test binary: fn is run by Main in a child
// started with Spec.Role set to name, and its result is the exit code.
// Call it from an init function.
func Role(name string, fn func() int) {
	if _, dup := roles[name]; dup {
		panic("testproc: role " + name + " registered twice")
	}
	roles[name] = fn
}

// Main runs the role named in the environment and exits with its result;
// in the parent process (no role) it returns at once. Call it first in
// TestMain.
func Main() {
	name := os.Getenv(RoleEnv)
	if name == "" {
		return
	}
	fn := roles[name]
	if fn == nil {
		fmt.Fprintf(os.Stderr, "testproc: no role %q in this test binary\n", name)
		os.Exit(2)
	}
	os.Exit(fn())
}

// Spec says what Start runs: a role of this test binary, one of its tests,
// or another program.
type Spec struct {
	Role string   // this test binary as the role registered under that name
	Args []string // a role's own command-line arguments
	Test string   // or this test binary's test of that name (-test.run ^Test$ -test.v)
	Argv []string // or this program and its arguments
	// Prefix runs the command through another (ip netns exec NAME).
	Prefix []string
	// Env is added to this process's environment.
	Env []string
	// ResultsFD: the child writes its result lines to file descriptor 3
	// (for children whose stdout UCX or a preloaded library also writes
	// to); stdout then only joins Output.
	ResultsFD bool
	// Stderr also goes to this process's stderr (as it is written).
	Stderr bool
}

// exitSleep is what a child built with -race sleeps at exit: Go's race
// runtime sleeps 1 s by default (GORACE atexit_sleep_ms) in every process,
// which made each child round cost a second doing nothing.
const exitSleep = "atexit_sleep_ms=50"

// childEnv is this process's environment for a child: a role or a round
// of this process is not inherited (a role's own child is not that role),
// and the race runtime's exit sleep is short unless GORACE sets it.
func childEnv() []string {
	var env []string
	gorace := ""
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case RoleEnv, itersEnv:
			continue
		case "GORACE":
			gorace = value
			continue
		}
		env = append(env, kv)
	}
	if !strings.Contains(gorace, "atexit_sleep_ms") {
		gorace = strings.TrimSpace(gorace + " " + exitSleep)
	}
	return append(env, "GORACE="+gorace)
}

func (s Spec) command(ctx context.Context) *exec.Cmd {
	self, err := os.Executable() // the path of this binary, whatever the working folder
	if err != nil {
		self = os.Args[0]
	}
	var argv []string
	switch {
	case s.Role != "":
		argv = append([]string{self, "-test.run=^$"}, s.Args...)
	case s.Test != "":
		argv = []string{self, "-test.run=^" + s.Test + "$", "-test.count=1", "-test.v", "-test.timeout=0"}
	default:
		argv = s.Argv
	}
	argv = append(append([]string{}, s.Prefix...), argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = childEnv()
	if s.Role != "" {
		cmd.Env = append(cmd.Env, RoleEnv+"="+s.Role)
	}
	cmd.Env = append(cmd.Env, s.Env...)
	// A child still running when ctx ends is asked for its goroutines'
	// stacks (a Go program prints them on SIGQUIT and exits); SIGKILL
	// follows if it has not ended WaitDelay later.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs spec to its end and returns what it printed (stdout and stderr
// together); when ctx ends first, the child is sent SIGQUIT (a Go child
// prints its goroutines' stacks), then SIGKILL 5 s later.
func Run(ctx context.Context, spec Spec) ([]byte, error) {
	return spec.command(ctx).CombinedOutput()
}

// Proc is a started child process. Its lines (stdout, or file descriptor 3
// with ResultsFD) are kept in order for Line, NextLine and WaitLine; what it
// printed on stdout and stderr is in Output (result lines on file
// descriptor 3 are not).
type Proc struct {
	Cmd   *exec.Cmd
	name  string
	self  bool // this test binary (a Role or Test), also through a Prefix
	stdin io.WriteCloser
	out   SyncBuffer

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced when a line arrives or the stream ends
	ended bool          // the line stream reached its end

	done chan struct{} // closed once the process was waited for
	err  error         // its Wait error, once done
}

// Start starts spec; the process is killed and waited for when the test
// ends, and its output logged if the test failed.
func Start(t testing.TB, spec Spec) *Proc {
	t.Helper()
	p := &Proc{Cmd: spec.command(context.Background()), more: make(chan struct{}), done: make(chan struct{})}
	p.name = spec.Role
	p.self = spec.Role != "" || spec.Test != ""
	if p.name == "" {
		p.name = spec.Test
	}
	if p.name == "" {
		p.name = spec.Argv[0]
	}
	var err error
	if p.stdin, err = p.Cmd.StdinPipe(); err != nil {
		t.Fatalf("testproc: %s: %v", p.name, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatalf("testproc: %s: %v", p.name, err)
	}
	var stderr io.Writer = &p.out
	if spec.Stderr {
		stderr = io.MultiWriter(&p.out, os.Stderr)
	}
	p.Cmd.Stderr = stderr
	if spec.ResultsFD {
		p.Cmd.Stdout = &p.out
		p.Cmd.ExtraFiles = []*os.File{w}
	} else {
		p.Cmd.Stdout = w
	}
	if err := p.Cmd.Start(); err != nil {
		r.Close()
		w.Close()
		t.Fatalf("testproc: start %s: %v", p.name, err)
	}
	w.Close()
	drained := make(chan struct{})
	go func() { p.read(r, !spec.ResultsFD); close(drained) }()
	go func() {
		p.err = p.Cmd.Wait()
		// Its last lines are read before Done (the pipe is not the
		// Cmd's to drain), bounded in case a grandchild holds it open:
		// then the pipe is closed, which ends the reader.
		select {
		case <-drained:
		case <-time.After(p.Cmd.WaitDelay):
			r.Close()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		p.Cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s (pid %d) printed:\n%s", p.name, p.Cmd.Process.Pid, p.Output())
		}
	})
	return p
}

func (p *Proc) read(r *os.File, toOutput bool) {
	defer r.Close()
	in := bufio.NewScanner(r)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		if toOutput {
			p.out.Write(append(in.Bytes(), '\n'))
		}
		p.mu.Lock()
		p.lines = append(p.lines, in.Text())
		close(p.more)
		p.more = make(chan struct{})
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.ended = true
	close(p.more)
	p.mu.Unlock()
}

// Line returns the next line, or false once the child closed its end and
// every line was read, or after timeout.
func (p *Proc) Line(timeout time.Duration) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if len(p.lines) > 0 {
			l := p.lines[0]
			p.lines = p.lines[1:]
			p.mu.Unlock()
			return l, true
		}
		if p.ended {
			p.mu.Unlock()
			return "", false
		}
		more := p.more
		p.mu.Unlock()
		select {
		case <-more:
		case <-deadline.C:
			return "", false
		}
	}
}

// WaitLine reads lines until one starts with prefix and returns the rest
// of it, trimmed; it fails the test if the child ends first or nothing
// matches within timeout (a child of this binary is first asked for its
// goroutines' stacks, SIGQUIT, which then appear in the log).
func (p *Proc) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l, ok := p.Line(time.Until(deadline))
		if ok {
			if rest, found := strings.CutPrefix(l, prefix); found {
				return strings.TrimSpace(rest)
			}
			continue
		}
		if time.Now().Before(deadline) {
			t.Fatalf("%s ended before printing %q:\n%s", p.name, prefix, p.Output())
		}
		p.quit()
		t.Fatalf("%s did not print %q in %v:\n%s", p.name, prefix, timeout, p.Output())
	}
}

// NextLine returns the next line, or false once the child closed its end
// and every line was read (as Line does); unlike Line, it fails the test
// when neither happens within timeout, as WaitLine does.
func (p *Proc) NextLine(t testing.TB, timeout time.Duration) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	l, ok := p.Line(timeout)
	if !ok && !time.Now().Before(deadline) {
		p.quit()
		t.Fatalf("%s printed no line in %v:\n%s", p.name, timeout, p.Output())
	}
	return l, ok
}

// quit asks a child of this test binary for its goroutines' stacks
// (SIGQUIT, which also ends it) and waits a little for them to be printed.
func (p *Proc) quit() {
	if p.self || strings.HasSuffix(p.Cmd.Path, ".test") {
		p.Cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// WaitOutput waits until the output holds want; it fails the test after
// timeout.
func (p *Proc) WaitOutput(t testing.TB, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Output(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q in %v:\n%s", p.name, want, timeout, p.Output())
		}
		select {
		case <-p.done:
			if !strings.Contains(p.Output(), want) {
				t.Fatalf("%s exited (%v) before printing %q:\n%s", p.name, p.err, want, p.Output())
			}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stdin is the child's standard input.
func (p *Proc) Stdin() io.Writer { return p.stdin }

// CloseStdin closes the child's standard input (the children of this
// project's tests end when it closes).
func (p *Proc) CloseStdin() { p.stdin.Close() }

// Output is everything the child printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the child has ended and was waited for.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL.
func (p *Proc) Kill() { p.Cmd.Process.Kill() }

// Wait waits up to timeout for the child to end and returns its exit code,
// or -1 when a signal ended it; it fails the test after timeout.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %v:\n%s", p.name, timeout, p.Output())
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Signal is the name of the signal that ended the child, "" if none did;
// it fails the test if the child has not ended within timeout.
func (p *Proc) Signal(t testing.TB, timeout time.Duration) string {
	t.Helper()
	p.Wait(t, timeout)
	if ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal().String()
	}
	return ""
}

// WaitDead waits until the child has died (a zombie, or already waited
// for), for a test that must know a SIGKILL took effect before it goes on;
// it fails the test after 10 s.
func (p *Proc) WaitDead(t testing.TB) {
	t.Helper()
	pid := p.Pid()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the command name in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return
		}
		select {
		case <-p.done:
			return
		case <-time.After(time.Millisecond):
		}
	}
	t.Fatalf("process %d still alive after SIGKILL", pid)
}

// SyncBuffer collects a running process's output (as its cmd.Stdout or
// Stderr); String is safe to call while the process writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
