package leakcheck

import (
	"runtime"
	"strconv"
	"strings"
)

// goroutine is one entry of a runtime.Stack dump of all goroutines.
type goroutine struct {
	id      int64
	state   string // "chan receive", "select", ... (without the wait time)
	funcs   []string
	stack   string // the entry as printed
	current bool   // the goroutine that took the dump
}

// snapshot parses runtime.Stack(all). The runtime's own goroutines (GC,
// finalizers, cleanups when idle) are not in it; the dumping goroutine is
// the first entry.
func snapshot() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for i, entry := range strings.Split(strings.TrimSpace(string(buf)), "\n\n") {
		if g, ok := parse(entry); ok {
			g.current = i == 0
			gs = append(gs, g)
		}
	}
	return gs
}

// parse reads "goroutine 7 [chan receive, 2 minutes]:" and the frames: a
// function line, then a tab-indented file line, ending with "created by".
func parse(entry string) (goroutine, bool) {
	lines := strings.Split(entry, "\n")
	head, ok := strings.CutPrefix(lines[0], "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	idText, rest, _ := strings.Cut(head, " ")
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil {
		return goroutine{}, false
	}
	g := goroutine{id: id, stack: entry}
	if i, j := strings.Index(rest, "["), strings.LastIndex(rest, "]"); i >= 0 && j > i {
		g.state, _, _ = strings.Cut(rest[i+1:j], ",")
	}
	for _, l := range lines[1:] {
		if l == "" || strings.HasPrefix(l, "\t") {
			continue
		}
		l = strings.TrimPrefix(l, "created by ")
		if k := strings.Index(l, " in goroutine "); k > 0 {
			l = l[:k]
		}
		if k := strings.LastIndex(l, "("); k > 0 && strings.HasSuffix(l, ")") {
			l = l[:k] // drop the arguments: "pkg.(*T).f(0x1, ...)" -> "pkg.(*T).f"
		}
		g.funcs = append(g.funcs, l)
	}
	return g, true
}

func (g goroutine) has(fn string) bool {
	for _, f := range g.funcs {
		if f == fn || strings.HasPrefix(f, fn+".") || strings.HasPrefix(f, fn+"[") {
			return true
		}
	}
	return false
}

// standard reports the goroutines the test framework and the standard
// library keep for the life of the process: a test waiting for its
// subtests or its turn to run in parallel, signal.Notify's loop, fuzzing;
// and ucx-go's own: the data paths' spawner (internal/datapath.spawn).
func standard(g goroutine) bool {
	switch {
	case g.has("testing.RunTests"), g.has("testing.(*T).Run"), g.has("testing.(*T).Parallel"),
		g.has("testing.runFuzzing"), g.has("testing.(*F).Fuzz"):
		return true
	case g.has("os/signal.signal_recv"), g.has("os/signal.loop"), g.has("runtime.ensureSigM"):
		return true
	case g.has("runtime.ReadTrace"), g.has("runtime/trace.Start"):
		return true
	case g.has("github.com/ucxgo/ucx/internal/datapath.spawn.func1.1"):
		return true // the data paths' spawner, locked to its thread for the life of the process
	}
	return false
}
