package ucp

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The rule engine.go's comment states, checked on the package's source:
// the worker's lock (engine.ucx) is named only in engine.go, and every
// method of the cgo package's Worker, Endpoint, Listener and Rkey that
// needs it is called (or taken as a value) only there, except the few
// that need no lock (engineLockFree). Inside engine.go, a function that
// makes such a call takes the lock itself, or says by its name that its
// caller holds it (…Locked, called from engine.go only), or is one that
// runs while nobody else can reach the worker (engineUnshared).

// engineFile is the one file that owns the worker's lock.
const engineFile = "engine.go"

// engineLockedTypes are the cgo types whose methods need the worker's lock.
var engineLockedTypes = []string{"Worker", "Endpoint", "Listener", "Rkey"}

// engineLockFree are their methods that need no lock: reads of what the
// shim's callbacks record, ucp_worker_signal (thread-safe), and the free of
// an endpoint record UCX is done with.
var engineLockFree = map[string]bool{
	"Endpoint.Error":   true,
	"Endpoint.Handle":  true,
	"Endpoint.Free":    true,
	"Listener.Pending": true,
	"Worker.Signal":    true,
}

// engineUnshared are the functions of engine.go that call UCX without the
// lock because no other goroutine can reach the worker: its release (the
// last reference is gone).
var engineUnshared = map[string]bool{"releaseWorker": true}

func TestEngineOwnsTheWorkerLock(t *testing.T) {
	for _, v := range checkEngineLock(t, nil) {
		t.Error(v)
	}
}

// TestEngineLockCheckFails plants violations in a file of their own and
// checks that each is found, and that what the rule allows is not.
func TestEngineLockCheckFails(t *testing.T) {
	const planted = `package ucp

import "github.com/ucxgo/ucx/cgo"

func plantedLock(w *Worker) {
	w.ucx.Lock() // the promoted field
	w.ucx.Unlock()
}

func plantedState(e *engine) {
	e.ucx.Lock()
	e.ucx.Unlock()
}

func plantedCall(ep *Endpoint) {
	c := ep.c
	_ = c.Flush() // through a variable
	_ = ep.Err()  // ucp's own method of the same kind of name: allowed
	_ = c.Error() // lock-free: allowed
}

func plantedValue(w *Worker) func(cgo.Request, uint) uint {
	return w.c.Spin // a method value
}

func plantedExpr() func(*cgo.Rkey) {
	return (*cgo.Rkey).Destroy // a method expression
}

func plantedListener(l *Listener) {
	l.c.Take()
	_ = l.c.Pending() // lock-free: allowed
}

func plantedLockedCall(w *Worker) {
	w.engine.getSlotLocked() // called without the lock
	w.plantedCallerHoldsLocked()
}
`
	// A second engine.go (another directory, the same base name): what the
	// rule asks of the engine file's own functions.
	const plantedEngine = `package ucp

func (e *engine) plantedUnlocked() {
	e.c.Progress() // no lock taken
}

func (e *engine) plantedLocks() {
	e.ucx.Lock()
	e.c.Progress()
	e.ucx.Unlock()
}

func (e *engine) plantedCallerHoldsLocked() {
	e.c.Progress()
}

func (e *engine) plantedSignal() {
	e.c.Signal() // lock-free
}
`
	got := checkEngineLock(t, map[string]string{
		"planted_violation.go":  planted,
		"planted/" + engineFile: plantedEngine,
	})
	want := []string{
		"engine.go:3: plantedUnlocked calls UCX",
		"planted_violation.go:6: uses the worker's lock engine.ucx",
		"planted_violation.go:7: uses the worker's lock engine.ucx",
		"planted_violation.go:11: uses the worker's lock engine.ucx",
		"planted_violation.go:12: uses the worker's lock engine.ucx",
		"planted_violation.go:17: calls cgo Endpoint.Flush",
		"planted_violation.go:23: calls cgo Worker.Spin",
		"planted_violation.go:27: calls cgo Rkey.Destroy",
		"planted_violation.go:31: calls cgo Listener.Take",
		"planted_violation.go:36: calls getSlotLocked",
		"planted_violation.go:37: calls plantedCallerHoldsLocked",
	}
	for _, w := range want {
		found := slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) })
		if !found {
			t.Errorf("planted violation not reported: %s", w)
		}
	}
	for _, g := range got {
		if !slices.ContainsFunc(want, func(w string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("reported, but not planted: %s", g)
		}
	}
}

// checkEngineLock type-checks the package's non-test files (and extra,
// file name to source) and returns every break of the rule.
func checkEngineLock(t *testing.T, extra map[string]string) []string {
	t.Helper()
	fset := token.NewFileSet()
	imp := newExportImporter(t, fset)
	files := imp.parseDir(t, ".")
	for name, src := range extra {
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	var typeErrs []error
	conf := types.Config{Importer: imp, Error: func(err error) { typeErrs = append(typeErrs, err) }}
	pkg, _ := conf.Check(imp.modPath+"/ucp", fset, files, info)
	if len(typeErrs) > 0 {
		t.Fatalf("type-checking package ucp: %v", typeErrs)
	}

	// The lock: engine's field ucx, not embedded.
	eng, _ := pkg.Scope().Lookup("engine").(*types.TypeName)
	if eng == nil {
		t.Fatal("no type engine in package ucp")
	}
	st, _ := eng.Type().Underlying().(*types.Struct)
	var lock *types.Var
	for i := 0; st != nil && i < st.NumFields(); i++ {
		f := st.Field(i)
		if f.Name() == "ucx" && !f.Embedded() && f.Type().String() == "sync.Mutex" {
			lock = f
		}
		if f.Embedded() && strings.HasPrefix(f.Type().String(), "sync.") {
			t.Errorf("engine embeds %s: its Lock would not be found by name", f.Type())
		}
	}
	if lock == nil {
		t.Fatal("engine has no field ucx sync.Mutex")
	}

	fileOf := func(p token.Pos) string { return filepath.Base(fset.Position(p).Filename) }
	where := func(p token.Pos) string {
		pos := fset.Position(p)
		return fmt.Sprintf("%s:%d", filepath.Base(pos.Filename), pos.Line)
	}
	cgoPath := imp.modPath + "/cgo"
	// lockedMethod names a cgo method that needs the lock, "" for others.
	lockedMethod := func(obj types.Object) string {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Pkg() == nil || fn.Pkg().Path() != cgoPath {
			return ""
		}
		recv := fn.Type().(*types.Signature).Recv()
		if recv == nil {
			return ""
		}
		rt := recv.Type()
		if p, ok := rt.(*types.Pointer); ok {
			rt = p.Elem()
		}
		named, ok := rt.(*types.Named)
		if !ok || !slices.Contains(engineLockedTypes, named.Obj().Name()) {
			return ""
		}
		name := named.Obj().Name() + "." + fn.Name()
		if engineLockFree[name] {
			return ""
		}
		return name
	}
	// The engine file's …Locked functions: their callers hold the lock.
	lockedFuncs := map[types.Object]bool{}
	for id, obj := range info.Defs {
		if fn, ok := obj.(*types.Func); ok && fileOf(id.Pos()) == engineFile && strings.HasSuffix(fn.Name(), "Locked") {
			lockedFuncs[obj] = true
		}
	}

	var bad []string
	for id, obj := range info.Uses {
		if fileOf(id.Pos()) == engineFile {
			continue
		}
		switch {
		case obj == lock:
			bad = append(bad, where(id.Pos())+": uses the worker's lock engine.ucx outside "+engineFile)
		case lockedMethod(obj) != "":
			bad = append(bad, where(id.Pos())+": calls cgo "+lockedMethod(obj)+", which needs the worker's lock, outside "+engineFile)
		case lockedFuncs[obj]:
			bad = append(bad, where(id.Pos())+": calls "+obj.Name()+", whose caller holds the worker's lock, outside "+engineFile)
		}
	}

	// Inside the engine file: a function that calls UCX takes the lock,
	// or is …Locked, or runs unshared.
	for _, f := range files {
		if fileOf(f.Pos()) != engineFile {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if strings.HasSuffix(name, "Locked") || engineUnshared[name] {
				continue
			}
			var calls []string
			locks := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if m := lockedMethod(info.Uses[sel.Sel]); m != "" {
					calls = append(calls, where(sel.Sel.Pos())+" "+m)
				}
				if sel.Sel.Name == "Lock" {
					if inner, ok := sel.X.(*ast.SelectorExpr); ok && info.Uses[inner.Sel] == lock {
						locks = true
					}
				}
				return true
			})
			if len(calls) > 0 && !locks {
				bad = append(bad, fmt.Sprintf("%s: %s calls UCX (%s) without taking the worker's lock, and its name does not end in Locked", where(fd.Pos()), name, strings.Join(calls, ", ")))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// exportImporter imports the package's dependencies from their export
// data, which go list builds (cgo included): the type-check is the
// compiler's, with no name left unresolved.
type exportImporter struct {
	types.Importer
	modPath string
	fset    *token.FileSet
}

func newExportImporter(t *testing.T, fset *token.FileSet) *exportImporter {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -export: %v\n%s", err, stderr)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "=")
		exports[path] = file
	}
	lookup := func(path string) (io.ReadCloser, error) {
		file := exports[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}
	modPath, _ := strings.CutSuffix(exportsSelf(exports), "/ucp")
	return &exportImporter{Importer: importer.ForCompiler(fset, "gc", lookup), modPath: modPath, fset: fset}
}

// exportsSelf is this package's import path among go list's: the one
// ending in /ucp.
func exportsSelf(exports map[string]string) string {
	for path := range exports {
		if strings.HasSuffix(path, "/ucp") {
			return path
		}
	}
	return ""
}

// parseDir parses the non-test Go files of dir that build here.
func (m *exportImporter) parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range append(append([]string(nil), bp.GoFiles...), bp.CgoFiles...) {
		f, err := parser.ParseFile(m.fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}
