package share_test

// The README's host and DPU pair (section "Sharing memory with a DPU"),
// compiled here: TestReadmeSharePair requires README.md to show host and
// dpu exactly as written below (whitespace aside), and runs them. host
// shares 4 KiB with the DPU on l until ctx ends and returns what the
// memory then holds; dpu reads the host's greeting into p and writes it
// back in upper case.

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
)

func host(ctx context.Context, l net.Listener, secret []byte) (_ string, err error) {
	sealer, err := share.NewHMACSealer(secret) // 16 bytes or more, the same on the DPU
	if err != nil {
		return "", err
	}
	mem, err := share.NewMemory(4096) // shareable memory (a memfd), zeroed
	if err != nil {
		return "", err
	}
	defer func() { err = errors.Join(err, mem.Close()) }() // runs after exp.Close
	copy(mem.Bytes(), "hello from the host")
	exp, err := share.NewExporter(sealer) // export mode where it can, else rkey
	if err != nil {
		return "", err
	}
	if err := exp.Add(ctx, "greeting", mem, share.ReadWrite); err != nil {
		return "", errors.Join(err, exp.Close())
	}
	served := make(chan error, 1)
	go func() { served <- exp.Serve(l) }() // any net.Listener: TCP, TLS, a Unix socket
	<-ctx.Done()
	return string(mem.Bytes()), errors.Join(exp.Close(), <-served) // revokes the DPU, closes l
}

func dpu(ctx context.Context, addr string, sealer share.Sealer, p []byte) (err error) {
	imp, err := share.Dial(ctx, "tcp", addr, sealer) // both sides prove the secret first
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, imp.Close()) }() // flushes, tells the host
	r, err := imp.Region("greeting")
	if err != nil {
		return err
	}
	if _, err := r.ReadAt(p, 0); err != nil { // io.ReaderAt
		return err
	}
	_, err = r.WriteAt(bytes.ToUpper(p), 0) // returns once in the host's memory
	return err
}

// readmeMarker is the line of README.md right before the fenced block
// that shows host and dpu.
const readmeMarker = "<!-- readme-pair: share/readme_test.go -->"

// readmeMaxLines bounds the README's block (the issue: a pair in at most
// 40 lines, every error checked).
const readmeMaxLines = 40

func TestReadmeSharePair(t *testing.T) {
	leakcheck.Goroutines(t) // first: its cleanup runs last

	// The README shows host and dpu as they are here.
	block := readmeBlock(t)
	assert.LessOrEqual(t, len(block), readmeMaxLines, "the README's pair")
	src, fns := readmePairSource(t)
	assert.Equal(t, normalized(src), normalized(block),
		"README.md's block after %q differs from host and dpu in share/readme_test.go", readmeMarker)
	for _, fn := range fns {
		errorsChecked(t, fn)
	}

	// They work: the DPU reads what the host wrote and writes it back in
	// upper case, into the host's memory.
	kids, fds, live := testproc.Children(os.Getpid()), memfds(t), handle.Live()
	l, err := net.Listen("tcp", hostAddr) // not loopback: UCX 1.20 refuses it (testproc.HostIP)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() }) // if the test fails first; host's exporter closes it
	hostCtx, stop := context.WithCancel(context.Background())
	type result struct {
		seen string
		err  error
	}
	hosted := make(chan result, 1)
	go func() {
		seen, err := host(hostCtx, l, secret)
		hosted <- result{seen, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := make([]byte, len("hello from the host"))
	dpuErr := dpu(ctx, l.Addr().String(), sealer(t), p)
	stop()
	var h result
	select {
	case h = <-hosted:
	case <-time.After(30 * time.Second):
		t.Fatal("host did not return 30 s after its ctx ended")
	}
	require.NoError(t, dpuErr, "dpu")
	require.NoError(t, h.err, "host")
	assert.Equal(t, "hello from the host", string(p), "what the DPU read")
	assert.Len(t, h.seen, 4096)
	assert.Equal(t, "HELLO FROM THE HOST", strings.TrimRight(h.seen, "\x00"), "what the host's memory holds")

	// Nothing is left: the listener was closed by the exporter, the
	// data-path processes ended, no memfd is open or mapped, no UCX handle
	// is live (leakcheck checks the goroutines).
	assert.ErrorIs(t, l.Close(), net.ErrClosed, "the exporter's Close closes the listener")
	if !assert.Eventually(t, func() bool {
		runtime.GC()
		return slices.Equal(testproc.Children(os.Getpid()), kids) &&
			slices.Equal(memfds(t), fds) && handle.Live() == live
	}, 10*time.Second, 10*time.Millisecond, "something outlived the pair") {
		t.Logf("children %v (before %v), memfds %v (before %v), UCX handles %d (before %d)",
			testproc.Children(os.Getpid()), kids, memfds(t), fds, handle.Live(), live)
	}
}

// readmeBlock is the fenced block that follows readmeMarker in README.md,
// a line an element.
func readmeBlock(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	i := slices.Index(lines, readmeMarker)
	require.GreaterOrEqual(t, i, 0, "README.md has no line %q", readmeMarker)
	require.Less(t, i+1, len(lines))
	require.Equal(t, "```go", lines[i+1], "README.md: a ```go block must follow %q", readmeMarker)
	n := slices.Index(lines[i+2:], "```")
	require.GreaterOrEqual(t, n, 0, "README.md: the block after %q does not end", readmeMarker)
	return lines[i+2 : i+2+n]
}

// readmePairSource is the text of host and dpu in this file, doc comments
// included, a blank line between them, a line an element; and their
// declarations.
func readmePairSource(t *testing.T) ([]string, []*ast.FuncDecl) {
	t.Helper()
	b, err := os.ReadFile("readme_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "readme_test.go", b, parser.ParseComments)
	require.NoError(t, err)
	var lines []string
	var fns []*ast.FuncDecl
	for _, name := range []string{"host", "dpu"} {
		i := slices.IndexFunc(f.Decls, func(d ast.Decl) bool {
			fn, ok := d.(*ast.FuncDecl)
			return ok && fn.Recv == nil && fn.Name.Name == name
		})
		require.GreaterOrEqual(t, i, 0, "no func %s in readme_test.go", name)
		fn := f.Decls[i].(*ast.FuncDecl)
		start := fn.Pos()
		if fn.Doc != nil {
			start = fn.Doc.Pos()
		}
		if lines != nil {
			lines = append(lines, "")
		}
		text := string(b[fset.Position(start).Offset:fset.Position(fn.End()).Offset])
		lines = append(lines, strings.Split(text, "\n")...)
		fns = append(fns, fn)
	}
	return lines, fns
}

// normalized is lines with each line's runs of white space made one space
// and its leading and trailing white space dropped.
func normalized(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.Join(strings.Fields(l), " ")
	}
	return out
}

// errorsChecked fails t where fn could drop an error, syntactically: a
// call whose results are discarded (other than copy), a defer or go
// statement on a call other than a function literal's (defer mem.Close()),
// or an assignment whose last result goes to _.
func errorsChecked(t *testing.T, fn *ast.FuncDecl) {
	t.Helper()
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.ExprStmt:
			if c, ok := s.X.(*ast.CallExpr); ok {
				if id, ok := c.Fun.(*ast.Ident); !ok || id.Name != "copy" {
					t.Errorf("%s: a call's results are dropped: %s", fn.Name.Name, callName(c))
				}
			}
		case *ast.DeferStmt:
			if _, ok := s.Call.Fun.(*ast.FuncLit); !ok {
				t.Errorf("%s: defer drops the results of %s", fn.Name.Name, callName(s.Call))
			}
		case *ast.GoStmt:
			if _, ok := s.Call.Fun.(*ast.FuncLit); !ok {
				t.Errorf("%s: go drops the results of %s", fn.Name.Name, callName(s.Call))
			}
		case *ast.AssignStmt:
			if id, ok := s.Lhs[len(s.Lhs)-1].(*ast.Ident); ok && id.Name == "_" {
				t.Errorf("%s: a result assigned to _ last (an error?)", fn.Name.Name)
			}
		}
		return true
	})
}

// callName names a call for errorsChecked's messages.
func callName(c *ast.CallExpr) string { return types.ExprString(c.Fun) + "(...)" }

// memfds is the memfd files this process has open or mapped (share's
// Memory and the importer's staging files), as "fd N: target" and
// "map: target" lines, sorted.
func memfds(t *testing.T) []string {
	t.Helper()
	var out []string
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, "/memfd:") {
			out = append(out, "fd "+e.Name()+": "+target)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	for _, line := range strings.Split(string(maps), "\n") {
		if i := strings.Index(line, "/memfd:"); i >= 0 {
			out = append(out, "map: "+line[i:])
		}
	}
	slices.Sort(out)
	return out
}
