package ucp_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Close orders (issue: "every order of closing context, worker, listener,
// endpoint, mapping and key with unflushed puts and gets in flight, all 720
// orders"). One case builds, in one context, a server worker progressed by
// a goroutine behind a listener, a client worker connected to it, the
// server's mapping and its key unpacked on the client's endpoint at once;
// it issues two puts and two gets, waits for none of them, and closes the
// context, the client worker, the listener, the client endpoint, the
// mapping and the key in the order of one permutation (the endpoint with
// CloseFlush or CloseForce by the parity of the order's index, the other
// mode on the other transport). Then it stops the server's progress and
// closes the server's endpoint and worker. Every close must return within
// a bound and none may report ucs.ErrClosed (each is the handle's first);
// once every case ran, garbage collection must bring ucs.LiveHandles back
// to where it was (the dropped requests are released by their worker).
// Each case lists how long each of its steps took (a force close that
// waited out its 1 s grace for gets UCX had already completed, before the
// endpoint read its gets' completion in UCX, made half the orders slow).
//
// The cases run in a child process, one per transport, which prints the
// order before each case: a crash or a wedge (a step over its bound dumps
// every goroutine and exits) fails that order, and a new child goes on with
// the orders after it, so that one run reports every order that fails.
//
// make test runs closeOrderQuick orders, make stress all 720;
// UCXGO_CLOSE_ORDERS=N runs N orders spread over the 720;
// UCXGO_CLOSE_ORDER_LIST=3,17,100-120 runs those indices (to reproduce);
// UCXGO_CLOSE_TRANSPORTS=tcp or shm runs one transport.

const closeOrderChildEnv = "UCXGO_CLOSE_ORDERS_CHILD"

// closeOrderHandles are the handles whose close order is permuted.
var closeOrderHandles = [6]string{"context", "worker", "listener", "endpoint", "mapping", "rkey"}

type closeOrderTransport struct {
	name, tls string
	peerErr   bool
	// connectWorker connects the client by ConnectWorker to the server
	// worker's address instead of through the listener (which is still
	// made and closed in its turn): through a listener, UCX 1.18.1 finds
	// the peer unreachable over posix, sysv and self alone, and with tcp
	// added it sends everything over tcp.
	connectWorker bool
	parity        int // CloseFlush on orders whose index+parity is even
}

var closeOrderTransports = []closeOrderTransport{
	{name: "tcp", tls: "tcp", peerErr: true, parity: 0},
	{name: "shm", tls: "posix,sysv,self", connectWorker: true, parity: 1},
}

const (
	closeOrderEPBound    = 5 * time.Second  // ctx of the client endpoint's Close
	closeOrderStepBound  = 45 * time.Second // any close or stop: over it is a wedge
	closeOrderSetupBound = 30 * time.Second
	closeOrderLiveBound  = 20 * time.Second // for garbage collection to release everything
	closeOrderLeakWait   = 40 * time.Second // after a failed release, to tell slow from never
)

// closeOrderPerms are the 720 orders of the six handles, lexicographic.
func closeOrderPerms() [][6]int {
	var perms [][6]int
	var p [6]int
	var used [6]bool
	var gen func(k int)
	gen = func(k int) {
		if k == len(p) {
			perms = append(perms, p)
			return
		}
		for i := range p {
			if !used[i] {
				used[i], p[k] = true, i
				gen(k + 1)
				used[i] = false
			}
		}
	}
	gen(0)
	return perms
}

func closeOrderString(order [6]int) string {
	names := make([]string, len(order))
	for i, h := range order {
		names[i] = closeOrderHandles[h]
	}
	return strings.Join(names, ">")
}

func closeOrderMode(tr closeOrderTransport, idx int) ucp.CloseMode {
	if (idx+tr.parity)%2 == 0 {
		return ucp.CloseFlush
	}
	return ucp.CloseForce
}

func closeModeString(m ucp.CloseMode) string {
	if m == ucp.CloseFlush {
		return "flush"
	}
	return "force"
}

// closeOrderQuick is how many orders make test runs: 36 spread over the
// 720, so that each handle is closed first in 6 of them and both close
// modes run on each transport (about 6 s under -race). The crashes these
// orders found were each met by many orders (every order that closed the
// mapping before a late peer operation was served), so a spread catches
// the kind; make stress runs all 720.
const closeOrderQuick = 36

// closeOrderSelection is the indices to run: closeOrderQuick of them, all
// 720 under make stress, or what the environment says.
func closeOrderSelection(t *testing.T, total int) []int {
	if s := os.Getenv("UCXGO_CLOSE_ORDER_LIST"); s != "" {
		idxs, err := parseCloseOrderList(s, total)
		if err != nil {
			t.Fatalf("UCXGO_CLOSE_ORDER_LIST: %v", err)
		}
		return idxs
	}
	n := min(closeOrderQuick, total)
	if testproc.Stress() > 0 {
		n = total
	}
	if s := os.Getenv("UCXGO_CLOSE_ORDERS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("UCXGO_CLOSE_ORDERS=%q: want a count from 1 to %d", s, total)
		}
		n = min(n, total)
	}
	idxs := make([]int, n)
	for i := range idxs {
		idxs[i] = i * total / n
		if total/n >= 2 {
			// Odd and even indices alternate: the close mode follows
			// the index's parity.
			idxs[i] += i % 2
		}
	}
	return idxs
}

// parseCloseOrderList reads "3,17,100-120".
func parseCloseOrderList(s string, total int) ([]int, error) {
	var idxs []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		if a < 0 || b >= total || a > b {
			return nil, fmt.Errorf("%q is not within 0-%d", f, total-1)
		}
		for i := a; i <= b; i++ {
			idxs = append(idxs, i)
		}
	}
	return idxs, nil
}

func TestCloseOrders(t *testing.T) {
	if spec := os.Getenv(closeOrderChildEnv); spec != "" {
		closeOrdersChild(t, spec)
		return
	}
	perms := closeOrderPerms()
	idxs := closeOrderSelection(t, len(perms))
	want := map[string]bool{}
	if s := os.Getenv("UCXGO_CLOSE_TRANSPORTS"); s != "" {
		for n := range strings.SplitSeq(s, ",") {
			want[strings.TrimSpace(n)] = true
		}
	}
	for _, tr := range closeOrderTransports {
		if len(want) > 0 && !want[tr.name] {
			continue
		}
		t.Run(tr.name, func(t *testing.T) { closeOrdersParent(t, tr, perms, idxs) })
	}
}

// closeOrderReport is what a child printed about its orders.
type closeOrderReport struct {
	started  int // last case started, -1 if none
	finished map[int]bool
	fails    []string // "FAIL" lines
	leaks    []string // "LEAK" lines, after the child's last order
	known    []string // "KNOWN" lines: the documented exception, logged
	ok       int
	end      bool
}

func parseCloseOrderOutput(out []byte) closeOrderReport {
	r := closeOrderReport{started: -1, finished: map[int]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// UCX's log lines may share a line with ours.
		_, rest, ok := strings.Cut(sc.Text(), "closeorder: ")
		if !ok {
			continue
		}
		word, rest, _ := strings.Cut(rest, " ")
		num, _, _ := strings.Cut(rest, " ")
		idx, _ := strconv.Atoi(strings.TrimSuffix(num, ":"))
		switch word {
		case "start":
			r.started = idx
		case "ok":
			r.ok++
			r.finished[idx] = true
		case "FAIL":
			r.fails = append(r.fails, rest)
			r.finished[idx] = true
		case "LEAK":
			r.leaks = append(r.leaks, rest)
		case "KNOWN":
			r.known = append(r.known, rest)
		case "end":
			r.end = true
		}
	}
	return r
}

// closeOrderTail is a child's output from the start of the order in which
// it first met a race report, a crash or a wedge (all of it if none).
func closeOrderTail(out []byte) string {
	s := string(out)
	first := -1
	for _, mark := range closeOrderMarks {
		if i := strings.Index(s, mark); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		if i := strings.LastIndex(s[:first], "closeorder: start"); i >= 0 {
			s = s[i:]
		}
	}
	const max = 24 << 10
	if len(s) > max {
		s = s[:max/2] + "\n[...]\n" + s[len(s)-max/2:]
	}
	return s
}

// closeOrderMarks start what a child prints when it dies: Go's reports
// and UCX's (its signal handler, its assertions).
var closeOrderMarks = []string{"WARNING: DATA RACE", "closeorder: WEDGED", "Caught signal", "Assertion", "panic:", "fatal error:", "SIGSEGV", "SIGABRT"}

// closeOrderFullReports is how many deaths of a child are reported with
// its output; later ones with their first line of diagnosis.
const closeOrderFullReports = 3

// closeOrderFirstLine is the first line of a child's output that says
// why it died.
func closeOrderFirstLine(out []byte) string {
	for l := range strings.SplitSeq(string(out), "\n") {
		for _, mark := range closeOrderMarks {
			if strings.Contains(l, mark) {
				return strings.TrimSpace(l)
			}
		}
	}
	return "(no diagnosis in its output)"
}

// closeOrdersParent runs the orders idxs in child processes: after a child
// crashes or wedges in an order, a new one goes on with the orders after it.
func closeOrdersParent(t *testing.T, tr closeOrderTransport, perms [][6]int, idxs []int) {
	start := time.Now()
	deadline := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-15 * time.Second)
	}
	ok, failed, crashed, died := 0, 0, 0, 0
	var crashedOrders []int
	remaining := idxs
	for len(remaining) > 0 {
		list := make([]string, len(remaining))
		for i, idx := range remaining {
			list[i] = strconv.Itoa(idx)
		}
		run, cancel := context.WithDeadline(context.Background(), deadline)
		out, err := testproc.Run(run, testproc.Spec{Test: "TestCloseOrders", Env: []string{closeOrderChildEnv + "=" + tr.name + ":" + strings.Join(list, ",")}})
		timedOut := run.Err() != nil
		cancel()
		r := parseCloseOrderOutput(out)
		ok += r.ok
		failed += len(r.fails)
		for _, f := range r.fails {
			i, _ := strconv.Atoi(strings.TrimSuffix(strings.Fields(f)[0], ":"))
			t.Errorf("%s order #%d [%s] close endpoint %s: %s", tr.name, i, closeOrderString(perms[i]), closeModeString(closeOrderMode(tr, i)), f)
		}
		for _, k := range r.known {
			t.Logf("%s: %s", tr.name, k)
		}
		for _, l := range r.leaks {
			t.Errorf("%s: after orders %d to %d (one child): %s", tr.name, remaining[0], remaining[len(remaining)-1], l)
		}
		if r.end {
			if r.ok+len(r.fails) < len(remaining) {
				t.Errorf("%s: child reported %d of its %d orders:\n%s", tr.name, r.ok+len(r.fails), len(remaining), closeOrderTail(out))
			}
			// A child that met the documented exception exits non-zero
			// through its own leak check.
			if err != nil && len(r.fails) == 0 && len(r.leaks) == 0 && len(r.known) == 0 {
				t.Errorf("%s: child ended all its orders but exited with %v:\n%s", tr.name, err, closeOrderTail(out))
			}
			break
		}
		// The child died: in the order it started last unless that one
		// finished (then between orders, e.g. while releasing what an
		// earlier order dropped, or in the final release).
		next := len(remaining)
		if r.started >= 0 {
			for i, idx := range remaining {
				if idx == r.started {
					next = i + 1
				}
			}
		}
		where := "before its first order"
		if r.started >= 0 && !r.finished[r.started] {
			crashed++
			where = fmt.Sprintf("in order #%d [%s] close endpoint %s", r.started, closeOrderString(perms[r.started]), closeModeString(closeOrderMode(tr, r.started)))
		} else if r.started >= 0 {
			where = fmt.Sprintf("after order #%d [%s] finished (releasing, or in the next setup)", r.started, closeOrderString(perms[r.started]))
		}
		if timedOut {
			t.Errorf("%s: child killed at the test deadline %s, %d orders left:\n%s", tr.name, where, len(remaining)-next, closeOrderTail(out))
			break
		}
		if died++; died <= closeOrderFullReports {
			t.Errorf("%s: child died (%v) %s:\n%s", tr.name, err, where, closeOrderTail(out))
		} else {
			t.Errorf("%s: child died (%v) %s: %s", tr.name, err, where, closeOrderFirstLine(out))
		}
		if r.started >= 0 && !r.finished[r.started] {
			crashedOrders = append(crashedOrders, r.started)
		}
		remaining = remaining[next:]
	}
	t.Logf("%s: %d orders: %d passed, %d failed, %d crashed or wedged, in %v",
		tr.name, len(idxs), ok, failed, crashed, time.Since(start).Round(time.Millisecond))
	if len(crashedOrders) > 0 {
		t.Logf("%s: orders that crashed or wedged: %v (rerun with UCXGO_CLOSE_ORDER_LIST)", tr.name, crashedOrders)
	}
}

// closeOrderBound runs f; if f has not returned within d, it prints what
// was running and every goroutine, and exits the child: a wedge. With
// UCXGO_CLOSE_ORDER_HOLD set the child stays wedged instead, for a
// debugger to attach to the pid it printed.
func closeOrderBound(what string, d time.Duration, f func()) {
	timer := time.AfterFunc(d, func() {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Printf("closeorder: WEDGED %s: not done after %v (pid %d)\n%s\n", what, d, os.Getpid(), buf)
		if os.Getenv("UCXGO_CLOSE_ORDER_HOLD") != "" {
			select {}
		}
		os.Exit(3)
	})
	defer timer.Stop()
	f()
}

// closeOrdersChild runs the cases of spec ("tcp:0,1,2").
func closeOrdersChild(t *testing.T, spec string) {
	name, list, _ := strings.Cut(spec, ":")
	var tr closeOrderTransport
	for _, c := range closeOrderTransports {
		if c.name == name {
			tr = c
		}
	}
	if tr.name == "" {
		t.Fatalf("no transport %q", name)
	}
	perms := closeOrderPerms()
	idxs, err := parseCloseOrderList(list, len(perms))
	if err != nil {
		t.Fatal(err)
	}
	base := settleHandles()
	start := time.Now()
	for _, idx := range idxs {
		fmt.Printf("closeorder: start %d %s [%s] close endpoint %s\n", idx, tr.name, closeOrderString(perms[idx]), closeModeString(closeOrderMode(tr, idx)))
		fails, times := closeOrderCase(tr, idx, perms[idx])
		if len(fails) == 1 && strings.HasPrefix(fails[0], "setup:") {
			// Connecting is not what this test checks, and once in 720 a
			// listener connection of UCX 1.23.0~rc1 was not established
			// within 20 s on a loaded CI machine: the order is run again,
			// once, on a fresh context, and the first failure is printed.
			fmt.Printf("closeorder: order #%d: setup retried after: %s\n", idx, fails[0])
			fails, times = closeOrderCase(tr, idx, perms[idx])
		}
		if len(fails) == 0 {
			fmt.Printf("closeorder: ok %d (%s; live handles %d, goroutines %d)\n", idx, strings.Join(times, ", "), ucs.LiveHandles(), runtime.NumGoroutine())
			continue
		}
		msg := strings.Join(fails, "; ")
		fmt.Printf("closeorder: FAIL %d: %s\n", idx, msg)
		t.Errorf("order #%d [%s]: %s", idx, closeOrderString(perms[idx]), msg)
	}
	fmt.Printf("closeorder: cases %d in %v\n", len(idxs), time.Since(start).Round(time.Millisecond))
	fmt.Printf("closeorder: release (live handles %d, %d before)\n", ucs.LiveHandles(), base)
	deadline := time.Now().Add(closeOrderLiveBound)
	for ucs.LiveHandles() != base && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if n := ucs.LiveHandles(); n != base {
		// Failed; go on collecting for a while to tell a slow release
		// from objects that stay.
		later := "and still live " + closeOrderLeakWait.String() + " later"
		for end := time.Now().Add(closeOrderLeakWait); time.Now().Before(end); {
			runtime.GC()
			time.Sleep(50 * time.Millisecond)
			if ucs.LiveHandles() == base {
				later = "released " + time.Since(deadline).Round(100*time.Millisecond).String() + " later"
				break
			}
		}
		if !tr.peerErr && ucs.LiveHandles() != base {
			// Without peer error handling a get whose server stopped (each
			// case stops its server right after the closes) never
			// completes: UCX 1.18's force close purges no AM-emulated get,
			// and the request keeps its worker, context and key. This is
			// the documented exception (docs/behaviour.md, "Not guaranteed": a
			// request that never completes); met in CI runs, not locally.
			fmt.Printf("closeorder: KNOWN %d UCX objects still live after the last order without peer error handling (the never-completing request of docs/behaviour.md), %s\n", n-base, later)
			t.Logf("%d UCX objects still live without peer error handling: the documented never-completing request, %s", n-base, later)
		} else if ucs.LiveHandles() != base {
			fmt.Printf("closeorder: LEAK %d UCX objects still live %v after the last order (%d before the first), %s\n", n-base, closeOrderLiveBound, base, later)
			t.Errorf("%d UCX objects still live after the last order, %s", n-base, later)
		}
	}
	fmt.Printf("closeorder: end\n")
}

// closeOrderCase sets up, issues the puts and gets, closes in order and
// returns what went wrong.
func closeOrderCase(tr closeOrderTransport, idx int, order [6]int) (fails, times []string) {
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	at := func(what string) string { return fmt.Sprintf("order #%d %s: %s", idx, tr.name, what) }
	// bound is closeOrderBound that notes how long each step took.
	bound := func(label, what string, d time.Duration, f func()) {
		start := time.Now()
		closeOrderBound(at(what), d, f)
		times = append(times, label+" "+time.Since(start).Round(100*time.Microsecond).String())
	}
	mode := closeOrderMode(tr, idx)

	var (
		ctx            *ucp.Context
		server, client *ucp.Worker
		l              *ucp.Listener
		ep, sep        *ucp.Endpoint
		target         *ucp.Mem
		rkey           *ucp.RemoteKey
		stopRun        = func() {}
		runErr         error
	)
	// closeRest closes, after a failed setup, whatever was made.
	closeRest := func() {
		bound("cleanup", "closing after a failed setup", closeOrderSetupBound, func() {
			stopRun()
			bctx, cancel := context.WithTimeout(context.Background(), closeOrderEPBound)
			defer cancel()
			if ep != nil {
				ep.Close(bctx, ucp.CloseForce)
			}
			if sep != nil {
				sep.Close(bctx, ucp.CloseForce)
			}
			if rkey != nil {
				rkey.Close()
			}
			if target != nil {
				target.Close()
			}
			if l != nil {
				l.Close()
			}
			if client != nil {
				client.Close()
			}
			if server != nil {
				server.Close()
			}
			if ctx != nil {
				ctx.Close()
			}
		})
	}
	var setupErr error
	bound("setup", "setup", closeOrderSetupBound, func() {
		setupErr = func() (err error) {
			// Shorter than the wedge bound: a connection UCX does not
			// establish ends as a setup error, not as a wedge.
			sctx, cancel := context.WithTimeout(context.Background(), closeOrderSetupBound*2/3)
			defer cancel()
			if ctx, err = ucp.NewContext(ucp.WithConfig("TLS", tr.tls)); err != nil {
				ctx = nil
				return fmt.Errorf("NewContext: %w", err)
			}
			if server, err = ctx.NewWorker(); err != nil {
				server = nil
				return fmt.Errorf("server NewWorker: %w", err)
			}
			if client, err = ctx.NewWorker(); err != nil {
				client = nil
				return fmt.Errorf("client NewWorker: %w", err)
			}
			run, stop := context.WithCancel(context.Background())
			runDone := make(chan error, 1)
			go func() { runDone <- server.Run(run) }()
			stopRun = func() {
				stop()
				runErr = <-runDone
				stopRun = func() {}
			}
			if l, err = server.Listen("127.0.0.1:0"); err != nil {
				l = nil
				return fmt.Errorf("Listen: %w", err)
			}
			if target, err = ctx.Allocate(4096); err != nil {
				target = nil
				return fmt.Errorf("Allocate: %w", err)
			}
			packed, err := target.PackRemoteKey()
			if err != nil {
				return fmt.Errorf("PackRemoteKey: %w", err)
			}
			type accepted struct {
				ep  *ucp.Endpoint
				err error
			}
			acc := make(chan accepted, 1)
			if tr.connectWorker {
				acc <- accepted{}
				addr, err := server.PackAddress()
				if err != nil {
					return fmt.Errorf("PackAddress: %w", err)
				}
				ep, err = client.ConnectWorker(addr, ucp.WithPeerErrorHandling(tr.peerErr))
			} else {
				go func() {
					ep, err := l.Accept(sctx, ucp.WithPeerErrorHandling(tr.peerErr))
					acc <- accepted{ep, err}
				}()
				ep, err = client.Connect(sctx, l.Addr().String(), ucp.WithPeerErrorHandling(tr.peerErr))
			}
			if err != nil {
				ep = nil
				cancel() // no connection to wait for
				sep = (<-acc).ep
				return fmt.Errorf("Connect: %w", err)
			}
			rkey, err = ep.UnpackRemoteKey(sctx, packed)
			if err != nil {
				rkey = nil
				cancel()
				sep = (<-acc).ep
				return fmt.Errorf("UnpackRemoteKey: %w", err)
			}
			a := <-acc
			sep = a.ep
			if a.err != nil {
				return fmt.Errorf("Accept: %w", a.err)
			}
			return nil
		}()
	})
	if setupErr != nil {
		fail("setup: %v", setupErr)
		closeRest()
		return fails, times
	}

	// Two puts of 64 bytes and two gets of 8, none waited for: the
	// requests are dropped at the end of the case.
	base := target.Address()
	puts := [][]byte{bytes.Repeat([]byte{0xa5}, 64), bytes.Repeat([]byte{0x5a}, 64)}
	gets := [][]byte{make([]byte, 8), make([]byte, 8)}
	var reqs []ucp.Request
	for i, b := range puts {
		req, err := putAt(b, base+uint64(64*i), rkey)
		if err != nil {
			fail("Put %d: %v", i, err)
			continue
		}
		reqs = append(reqs, req)
	}
	for i, b := range gets {
		req, err := getAt(b, base+uint64(256+8*i), rkey)
		if err != nil {
			fail("Get %d: %v", i, err)
			continue
		}
		reqs = append(reqs, req)
	}

	for step, h := range order {
		what := closeOrderHandles[h]
		var err error
		bound(what, fmt.Sprintf("close %s (step %d of [%s])", what, step, closeOrderString(order)), closeOrderStepBound, func() {
			switch what {
			case "context":
				err = ctx.Close()
			case "worker":
				err = client.Close()
			case "listener":
				err = l.Close()
			case "endpoint":
				cctx, cancel := context.WithTimeout(context.Background(), closeOrderEPBound)
				defer cancel()
				err = ep.Close(cctx, mode)
			case "mapping":
				err = target.Close()
			case "rkey":
				err = rkey.Close()
			}
		})
		switch {
		case err == nil:
		case errors.Is(err, ucs.ErrClosed):
			fail("first close of the %s (step %d) reported ErrClosed: %v", what, step, err)
		case what == "endpoint" && mode == ucp.CloseFlush && errors.Is(err, ucs.ErrTimedOut):
			// A flush close is bounded by its ctx, as documented; under a
			// loaded CI machine (race, cgocheck2) the peer's flush met it
			// once in 720. The close has returned; the final LiveHandles
			// check still proves that nothing stays behind.
		default:
			fail("close of the %s (step %d): %v", what, step, err)
		}
	}

	bound("stop-run", "stopping the server's Run", closeOrderStepBound, func() { stopRun() })
	if runErr != nil {
		fail("server Run: %v", runErr)
	}
	bound("server", "closing the server endpoint and worker", closeOrderStepBound, func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeOrderEPBound)
		defer cancel()
		if sep == nil {
			// connected by ConnectWorker: the server has no endpoint
		} else if err := sep.Close(cctx, ucp.CloseForce); err != nil {
			fail("server endpoint Close: %v", err)
		}
		if err := server.Close(); err != nil {
			fail("server worker Close: %v", err)
		}
	})
	runtime.KeepAlive(puts)
	runtime.KeepAlive(gets)
	reqs = nil // dropped unwaited: the worker releases them
	_ = reqs
	return fails, times
}
