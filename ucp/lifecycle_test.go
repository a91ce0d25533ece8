package ucp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Lifecycle permutations (issue 6): a full set of handles with operations
// in flight is closed in a random order; every step must return (no hang),
// closed handles answer ErrClosed, open ones keep working, and once all is
// closed the live-handle counter is back where it started. Handles dropped
// without Close must be released by their cleanups after forced GCs.
//
// Reproducing: every plan is logged as one line, e.g.
//
//	tcp address run=false smem=alloc rma=get/8 am=64 | cw cep:force smem rma:200ms rkey l ctx sw
//
// and UCXGO_LIFECYCLE_PLAN='<that line>' makes TestLifecycleRandom (or, for
// a plan with drop steps, TestLifecycleDropped) run only it.
// UCXGO_LIFECYCLE_SEED and UCXGO_LIFECYCLE_SAMPLES set the random sample;
// UCXGO_LIFECYCLE_KNOWN_BUGS=1 runs the known-bug plans of lcNamedPlans and
// lifts the random sample's constraints (see lcRandomPlan).
const (
	lcSamplesEnv   = "UCXGO_LIFECYCLE_SAMPLES"
	lcSeedEnv      = "UCXGO_LIFECYCLE_SEED"
	lcPlanEnv      = "UCXGO_LIFECYCLE_PLAN"
	lcKnownBugsEnv = "UCXGO_LIFECYCLE_KNOWN_BUGS"
)

// lcDefaultSamples keeps the random sample within a few seconds per
// transport on a loaded two-core machine, under -race.
const lcDefaultSamples = 24

// lcDefaultDropSamples is the number of drop plans per transport and
// connection mode (UCXGO_LIFECYCLE_SAMPLES/10 when set).
const lcDefaultDropSamples = 4

const lcAM = 31 // the server's active-message handler id

// lcStepNames are the plan's steps: closing a handle (context, server and
// client worker, listener, server and client endpoint, server and client
// mapping, remote key) or finishing a request (the RMA and the AM send).
var lcStepNames = []string{"ctx", "sw", "cw", "l", "sep", "cep", "smem", "cmem", "rkey", "rma", "am"}

// lcRequired are the handles every plan builds: the requests need them.
var lcRequired = []string{"ctx", "sw", "cw", "cep", "smem", "rkey"}

// Step bounds: a step that takes longer is a hang, not slowness (every
// blocking call in a step has a ctx far shorter than this).
const (
	lcStepBound  = 20 * time.Second
	lcSetupBound = 40 * time.Second
)

type lcPlan struct {
	tls     string // shm: posix,sysv,self, no peer error handling; tcp: with it
	connect string // listener: Connect + Accept; address: ConnectWorker both ways
	run     bool   // the server worker is progressed by Run
	smem    string // alloc: UCX allocates the target; reg: test-owned memory registered
	rma     string // get, put, getmem, putmem (mem forms use cmem when the plan has it)
	rmaSize int
	amSize  int // 64 KiB and more: rendezvous
	steps   []lcStep
}

// lcStep is one step; how is the endpoint close (force, flush: with a
// bounded ctx; force-bg, flush-bg: with context.Background()),
// the request's end (wait, cancel, or a Wait timeout such as 1ms), or drop
// (TestLifecycleDropped: the handle is never closed).
type lcStep struct{ what, how string }

func (p lcPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s run=%t smem=%s rma=%s/%d am=%d |", p.tls, p.connect, p.run, p.smem, p.rma, p.rmaSize, p.amSize)
	for _, s := range p.steps {
		b.WriteString(" " + s.what)
		if s.how != "" {
			b.WriteString(":" + s.how)
		}
	}
	return b.String()
}

func (p lcPlan) has(what string) bool {
	return slices.ContainsFunc(p.steps, func(s lcStep) bool { return s.what == what })
}

func parseLCPlan(s string) (lcPlan, error) {
	var p lcPlan
	head, tail, ok := strings.Cut(s, "|")
	f := strings.Fields(head)
	if !ok || len(f) != 6 {
		return p, fmt.Errorf("plan %q: want \"TLS CONNECT run=BOOL smem=KIND rma=KIND/SIZE am=SIZE | STEP[:HOW] ...\"", s)
	}
	p.tls, p.connect = f[0], f[1]
	var err error
	if p.run, err = strconv.ParseBool(strings.TrimPrefix(f[2], "run=")); err != nil {
		return p, fmt.Errorf("plan %q: %w", s, err)
	}
	p.smem = strings.TrimPrefix(f[3], "smem=")
	kind, size, _ := strings.Cut(strings.TrimPrefix(f[4], "rma="), "/")
	p.rma = kind
	if p.rmaSize, err = strconv.Atoi(size); err != nil {
		return p, fmt.Errorf("plan %q: rma size: %w", s, err)
	}
	if p.amSize, err = strconv.Atoi(strings.TrimPrefix(f[5], "am=")); err != nil {
		return p, fmt.Errorf("plan %q: am size: %w", s, err)
	}
	for _, w := range strings.Fields(tail) {
		what, how, _ := strings.Cut(w, ":")
		p.steps = append(p.steps, lcStep{what, how})
	}
	return p, p.validate()
}

func (p lcPlan) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("plan %q: %s", p, fmt.Sprintf(format, args...))
	}
	if p.tls != "shm" && p.tls != "tcp" {
		return bad("transport %q (shm or tcp)", p.tls)
	}
	if p.connect != "listener" && p.connect != "address" {
		return bad("connect %q (listener or address)", p.connect)
	}
	if p.smem != "alloc" && p.smem != "reg" {
		return bad("smem %q (alloc or reg)", p.smem)
	}
	if !slices.Contains([]string{"get", "put", "getmem", "putmem"}, p.rma) || p.rmaSize <= 0 || p.rmaSize > 1<<20 || p.amSize < 0 {
		return bad("operations")
	}
	seen := map[string]bool{}
	for _, s := range p.steps {
		if !slices.Contains(lcStepNames, s.what) || seen[s.what] {
			return bad("step %q unknown or repeated", s.what)
		}
		seen[s.what] = true
		ok := s.how == "" || s.how == "drop"
		switch s.what {
		case "sep", "cep":
			ok = ok || s.how == "force" || s.how == "force-bg" || s.how == "flush" || s.how == "flush-bg"
		case "rma", "am":
			_, err := time.ParseDuration(s.how)
			ok = s.how == "wait" || s.how == "complete" || s.how == "detach" || err == nil
		}
		if !ok {
			return bad("step %s:%s", s.what, s.how)
		}
	}
	for _, r := range lcRequired {
		if !seen[r] {
			return bad("no step %q (required: %v)", r, lcRequired)
		}
	}
	if p.connect == "listener" && (!seen["l"] || !seen["sep"]) {
		return bad("listener mode needs steps l and sep")
	}
	return nil
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// lcRandomPlan is a random order of all steps with random variants. With
// free false it avoids what the known library bugs need (lcNamedPlans): the
// RMA target is registered test-owned memory that stays mapped, the RMA is
// not cancelled but waited for to completion before the server worker or
// endpoint is closed, and so is, on shm, a rendezvous AM send (force-closing
// the endpoint does not end it there); on tcp the RMA is a get (a put's
// target may still serve it when the client endpoint goes: a UCX abort).
// Every other order and variant stays random: everything else is closed
// with the RMA in flight, and the AM send may be abandoned.
func lcRandomPlan(r *rand.Rand, tls string, free bool) lcPlan {
	p := lcPlan{
		tls:     tls,
		connect: pick(r, "listener", "address"),
		run:     !free || r.IntN(8) != 0, // free: sometimes a server nobody progresses
		smem:    "reg",
		rma:     pick(r, "get", "put", "getmem", "putmem"),
		rmaSize: pick(r, 8, 1<<20),
		amSize:  pick(r, 64, 256<<10),
	}
	if free {
		p.smem = pick(r, "alloc", "reg")
	} else if tls == "tcp" {
		p.rma = pick(r, "get", "getmem") // see ucx-fatal-put-after-force-close
	}
	var held []lcStep // to complete before the server stops
	for _, i := range r.Perm(len(lcStepNames)) {
		s := lcStep{what: lcStepNames[i]}
		switch s.what {
		case "sep", "cep":
			s.how = pick(r, "force", "force-bg", "flush")
			if free {
				s.how = pick(r, "force", "force-bg", "flush", "flush-bg")
			} else if s.what == "cep" {
				s.how = pick(r, "force", "force-bg")
			}
		case "rma", "am":
			s.how = pick(r, "wait", "detach", "1ms", "200ms")
		}
		if !free && (s.what == "rma" || s.what == "am" && tls == "shm" && p.amSize >= 64<<10) {
			s.how = "complete"
			held = append(held, s)
			continue
		}
		p.steps = append(p.steps, s)
	}
	// Requests to complete go before the server stops and before the
	// client endpoint's force close, which cancels them.
	for _, s := range held {
		last := slices.IndexFunc(p.steps, func(s lcStep) bool { return s.what == "sw" || s.what == "sep" || s.what == "cep" })
		p.steps = slices.Insert(p.steps, r.IntN(last+1), s)
	}
	return p
}

// lcTarget is the memory a "reg" plan registers as the RMA target: mapped
// once for the whole test binary and never unmapped, so that an operation
// still running after its mapping was closed touches valid memory.
var lcTarget = sync.OnceValue(func() []byte {
	b, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		panic(err)
	}
	return b
})

// lcEnv is the set of handles a plan builds. It is referenced by no
// cleanup or goroutine, so that TestLifecycleDropped can drop it.
type lcEnv struct {
	p      lcPlan
	closed map[string]bool

	ctx        *ucp.Context
	sw, cw     *ucp.Worker
	l          *ucp.Listener
	sep, cep   *ucp.Endpoint
	smem, cmem *ucp.Mem
	rkey       *ucp.RemoteKey
	rma, am    *ucp.Request

	packed         []byte // smem's rkey
	swAddr, cwAddr []byte
	run            *workerRun // the server's, if the plan runs it

	mu    sync.Mutex
	trace []string // what each step did, printed when the plan fails
}

func (e *lcEnv) logf(format string, args ...any) {
	e.mu.Lock()
	e.trace = append(e.trace, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// within runs f, failing the test with every goroutine's stack if it does
// not return within d (a hang). f must not call t.FailNow.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("HANG: %s did not return within %v\n%s", what, d, buf)
	}
}

// lcSetup builds the plan's handles and starts its requests. On error, the
// handles built so far are in e (closeAll closes them).
func lcSetup(e *lcEnv) (err error) {
	p := e.p
	wrap := func(what string, err error) error { return fmt.Errorf("setup: %s: %w", what, err) }
	// The listener's connection manager is tcp's (sockcm): without tcp in
	// TLS, Listen and Connect succeed but no connection request ever
	// arrives. With peer error handling off, data still goes over shm.
	tls, peerErr := "posix,sysv,self", false
	switch {
	case p.tls == "tcp":
		tls, peerErr = "tcp", true
	case p.connect == "listener":
		tls = "posix,sysv,self,tcp"
	}
	// Connecting needs both sides progressed: build progresses the workers
	// the plan does not run while it connects and flushes. A server the
	// plan never progresses is left alone (no flush) when ConnectWorker
	// needs no round trip.
	c := pairConfig{
		tls:       tls,
		epOpts:    []ucp.EndpointOption{ucp.WithPeerErrorHandling(peerErr)},
		connect:   byAddress,
		listen:    p.has("l"),
		back:      p.has("sep"),
		runServer: p.run,
		flush:     p.connect == "listener" || p.run,
	}
	if p.connect == "listener" {
		c.connect = byListener
	}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pr pair // not e's: see lcEnv
	err = pr.build(wctx, c)
	e.ctx, e.sw, e.cw, e.l, e.cep, e.sep, e.run = pr.ctx, pr.server, pr.client, pr.listener, pr.ep, pr.sep, pr.serverRun
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	// The handler drops the payload (dispatch releases rendezvous data).
	if err = e.sw.SetAMHandler(lcAM, func(*ucp.AMMessage) {}); err != nil {
		return wrap("am handler", err)
	}
	if e.swAddr, err = e.sw.PackAddress(); err != nil {
		return wrap("server address", err)
	}
	if e.cwAddr, err = e.cw.PackAddress(); err != nil {
		return wrap("client address", err)
	}
	if p.smem == "reg" {
		b := lcTarget()
		e.smem, err = e.ctx.RegisterPointer(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	} else {
		e.smem, err = e.ctx.Allocate(1 << 20)
	}
	if err != nil {
		return wrap("map server memory", err)
	}
	if e.packed, err = e.smem.PackRemoteKey(); err != nil {
		return wrap("pack rkey", err)
	}
	if e.rkey, err = e.cep.UnpackRemoteKey(context.Background(), e.packed); err != nil {
		return wrap("unpack rkey", err)
	}
	if p.has("cmem") {
		if e.cmem, err = e.ctx.Allocate(1 << 20); err != nil {
			return wrap("map client memory", err)
		}
	}
	// The requests start with nobody progressing the client (build's
	// progress ended with it): they stay in flight until a step waits.
	if p.has("rma") {
		var req ucp.Request
		n, raddr := p.rmaSize, e.smem.Address()
		switch {
		case p.rma == "getmem" && e.cmem != nil:
			req, err = getMemAt(e.cmem.Range(0, n), raddr, e.rkey)
		case p.rma == "putmem" && e.cmem != nil:
			req, err = putMemAt(e.cmem.Range(0, n), raddr, e.rkey)
		case p.rma == "get" || p.rma == "getmem":
			req, err = getAt(make([]byte, n), raddr, e.rkey)
		default:
			req, err = putAt(pattern(n, 1), raddr, e.rkey)
		}
		if err != nil {
			return wrap("start rma", err)
		}
		e.rma = &req
	}
	if p.has("am") {
		var flags ucp.AMSendFlags
		if p.amSize >= 64<<10 {
			flags = ucp.AMRndv
		}
		req, err := e.cep.SendAM(lcAM, []byte("lifecycle"), pattern(p.amSize, 2), flags)
		if err != nil {
			return wrap("start am", err)
		}
		e.am = &req
	}
	return nil
}

// lcRequestWait is how long a "wait" step waits: the request completes in
// that time when both sides can progress, and is abandoned otherwise.
const lcRequestWait = 500 * time.Millisecond

// do runs one step.
func (e *lcEnv) do(t *testing.T, i int, s lcStep) {
	at := fmt.Sprintf("step %d (%s:%s)", i, s.what, s.how)
	closeTwice := func(c interface{ Close() error }) {
		assert.NoError(t, c.Close(), "%s: Close", at)
		assert.NoError(t, c.Close(), "%s: second Close", at)
	}
	if s.how == "drop" {
		e.logf("%s: dropped, never closed", at)
		return
	}
	switch s.what {
	case "ctx":
		closeTwice(e.ctx)
	case "sw":
		closeTwice(e.sw)
	case "cw":
		closeTwice(e.cw)
	case "l":
		closeTwice(e.l)
	case "smem":
		closeTwice(e.smem)
	case "cmem":
		closeTwice(e.cmem)
	case "rkey":
		closeTwice(e.rkey)
	case "sep", "cep":
		ep := e.sep
		if s.what == "cep" {
			ep = e.cep
		}
		mode, ctx := ucp.CloseForce, context.Background()
		if s.how == "flush-bg" {
			mode = ucp.CloseFlush
		}
		if s.how == "flush" {
			var cancel context.CancelFunc
			mode = ucp.CloseFlush
			ctx, cancel = context.WithTimeout(ctx, lcRequestWait)
			defer cancel()
		}
		err := ep.Close(ctx, mode)
		e.logf("%s: Close: %v", at, err)
		assert.NotErrorIs(t, err, ucs.ErrClosed, "%s: first Close", at)
		assert.NoError(t, ep.Close(ctx, mode), "%s: second Close", at)
	case "rma", "am":
		req := e.rma
		if s.what == "am" {
			req = e.am
		}
		if s.how == "detach" {
			req.Detach()
			e.logf("%s: detached", at)
			if !req.Done() {
				assert.ErrorIs(t, req.Wait(context.Background()), ucs.ErrCanceled, "%s: Wait after Detach", at)
			}
			break
		}
		var err error
		d := lcRequestWait
		switch s.how {
		case "wait":
		case "complete": // the plan guarantees it can complete
			d = lcStepBound / 2
		default:
			d, _ = time.ParseDuration(s.how)
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err = req.Wait(ctx)
		cancel()
		if s.how == "complete" {
			assert.NoError(t, err, "%s: the request can complete", at)
		}
		e.logf("%s: %v", at, err)
		if !req.Done() {
			// Wait gave up and left the operation in flight; a user who will
			// not wait again detaches it, and every copy then says so.
			require.ErrorIs(t, err, ucs.ErrTimedOut, "%s: not done after Wait", at)
			req.Detach()
			assert.ErrorIs(t, req.Wait(context.Background()), ucs.ErrCanceled, "%s: Wait after Detach", at)
			assert.False(t, req.Done(), "%s: Done after Detach", at)
		} else {
			// A second Wait returns the recorded outcome at once.
			again := req.Wait(context.Background())
			assert.Equal(t, err, again, "%s: second Wait: %v after %v", at, again, err)
		}
	}
	e.closed[s.what] = true
}

// check probes every handle after a step: a closed one answers ErrClosed
// to each operation, an open one keeps working whatever was closed before
// (children keep their parents alive).
func (e *lcEnv) check(t *testing.T, at string) {
	isClosed := func(what string, err error, op string) {
		assert.ErrorIs(t, err, ucs.ErrClosed, "after %s: %s on closed %s", at, op, what)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error

	if e.closed["ctx"] {
		_, err = e.ctx.Info()
		isClosed("ctx", err, "Info")
		_, err = e.ctx.NewWorker()
		isClosed("ctx", err, "NewWorker")
		_, err = e.ctx.Allocate(8)
		isClosed("ctx", err, "Allocate")
	} else {
		_, err = e.ctx.Info()
		assert.NoError(t, err, "after %s: Info on open ctx", at)
	}

	for _, k := range []struct {
		what string
		w    *ucp.Worker
		peer []byte
	}{{"sw", e.sw, e.cwAddr}, {"cw", e.cw, e.swAddr}} {
		if e.closed[k.what] {
			_, err = k.w.Progress()
			isClosed(k.what, err, "Progress")
			_, err = k.w.PackAddress()
			isClosed(k.what, err, "Address")
			isClosed(k.what, k.w.Wait(ctx), "Wait")
			isClosed(k.what, k.w.Flush(ctx), "Flush")
			_, err = k.w.Listen("127.0.0.1:0")
			isClosed(k.what, err, "Listen")
			_, err = k.w.ConnectWorker(k.peer)
			isClosed(k.what, err, "ConnectWorker")
			isClosed(k.what, k.w.SetAMHandler(lcAM+1, func(*ucp.AMMessage) {}), "SetAMHandler")
		} else {
			_, err = k.w.PackAddress()
			assert.NoError(t, err, "after %s: Address on open %s", at, k.what)
		}
	}

	if e.l != nil {
		if e.closed["l"] || e.closed["sw"] { // a closed worker ends its listener's Accept
			_, err = e.l.Accept(ctx)
			isClosed("l", err, "Accept")
		} else if e.p.run { // Accept progresses the server: not for a plan that never does
			cctx, ccancel := context.WithCancel(context.Background())
			ccancel()
			cr, err := e.l.AcceptRequest(cctx)
			if cr != nil {
				cr.Reject()
			}
			assert.NotErrorIs(t, err, ucs.ErrClosed, "after %s: Accept on open listener", at)
		}
	}

	for _, k := range []struct {
		what string
		ep   *ucp.Endpoint
	}{{"sep", e.sep}, {"cep", e.cep}} {
		if k.ep == nil {
			continue
		}
		if e.closed[k.what] {
			isClosed(k.what, k.ep.Flush(ctx), "Flush")
			_, err = k.ep.UnpackRemoteKey(context.Background(), e.packed)
			isClosed(k.what, err, "UnpackRemoteKey")
			_, err = k.ep.SendAM(lcAM, nil, []byte{1}, 0)
			isClosed(k.what, err, "SendAM")
			if k.what == "cep" && !e.closed["rkey"] { // the key's endpoint; with a closed key the key answers first
				_, err = getAt(make([]byte, 8), e.smem.Address(), e.rkey)
				isClosed(k.what, err, "Get")
			}
		} else if !e.closed["smem"] { // a key of unmapped memory: UCX logs errors
			// Unpacking needs no progress; a failed peer may refuse it,
			// but never with ErrClosed.
			rk, err := k.ep.UnpackRemoteKey(context.Background(), e.packed)
			assert.NotErrorIs(t, err, ucs.ErrClosed, "after %s: UnpackRemoteKey on open %s", at, k.what)
			if rk != nil {
				assert.NoError(t, rk.Close())
			}
		}
	}

	for _, k := range []struct {
		what string
		m    *ucp.Mem
	}{{"smem", e.smem}, {"cmem", e.cmem}} {
		if k.m == nil {
			continue
		}
		if e.closed[k.what] {
			_, err = k.m.Bytes()
			isClosed(k.what, err, "Bytes")
			_, err = k.m.PackRemoteKey()
			isClosed(k.what, err, "PackRemoteKey")
			_, err = k.m.Export()
			isClosed(k.what, err, "Export")
			_, err = getMemAt(k.m.Range(0, 8), e.smem.Address(), e.rkey) // the mapping is checked first
			isClosed(k.what, err, "GetMem")
		} else {
			_, err = k.m.Bytes()
			assert.NoError(t, err, "after %s: Bytes on open %s", at, k.what)
			_, err = k.m.PackRemoteKey()
			assert.NoError(t, err, "after %s: PackRemoteKey on open %s", at, k.what)
		}
	}

	if e.closed["rkey"] && e.rkey != nil {
		_, err = putAt([]byte{1}, e.smem.Address(), e.rkey) // the key is checked first
		isClosed("rkey", err, "Put")
	}
}

// closeAll closes what a failed plan left open, so that later plans start
// from a known count.
func (e *lcEnv) closeAll() {
	for _, r := range []*ucp.Request{e.rma, e.am} {
		if r != nil && !r.Done() {
			r.Detach()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []interface{ Close() error }{e.rkey, e.smem, e.cmem, e.l, e.sw, e.cw, e.ctx} {
		if c != nil && !isNilHandle(c) {
			c.Close()
		}
	}
	for _, ep := range []*ucp.Endpoint{e.sep, e.cep} {
		if ep != nil {
			ep.Close(ctx, ucp.CloseForce)
		}
	}
	if e.run != nil {
		e.run.cancel()
	}
}

// isNilHandle reports whether c holds a nil pointer (a handle never built).
func isNilHandle(c interface{ Close() error }) bool {
	switch h := c.(type) {
	case *ucp.RemoteKey:
		return h == nil
	case *ucp.Mem:
		return h == nil
	case *ucp.Listener:
		return h == nil
	case *ucp.Worker:
		return h == nil
	case *ucp.Context:
		return h == nil
	}
	return false
}

// lcExecute builds the plan's handles and runs its steps, each bounded by
// a hang detector, checking every handle after each. It returns the env
// (nil if the test failed).
func lcExecute(t *testing.T, p lcPlan) *lcEnv {
	e := &lcEnv{p: p, closed: map[string]bool{}}
	var err error
	within(t, lcSetupBound, "setup", func() { err = lcSetup(e) })
	if err != nil {
		e.closeAll()
		t.Fatal(err)
	}
	e.check(t, "setup")
	for i, s := range p.steps {
		at := fmt.Sprintf("step %d (%s:%s)", i, s.what, s.how)
		within(t, lcStepBound, at, func() { e.do(t, i, s) })
		within(t, lcStepBound, "checks after "+at, func() { e.check(t, at) })
	}
	return e
}

// settleHandles collects garbage until the live-handle count is stable, so
// that a plan's baseline excludes what earlier tests dropped.
func settleHandles() int64 {
	last := ucs.LiveHandles()
	for range 50 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		n := ucs.LiveHandles()
		if n == last {
			return n
		}
		last = n
	}
	return last
}

// waitHandles polls, with forced GCs, until LiveHandles is want or d ends.
func waitHandles(want int64, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for {
		n := ucs.LiveHandles()
		if n == want || time.Now().After(deadline) {
			return n
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// lcRunClosePlan runs one plan in which every handle is closed.
func lcRunClosePlan(t *testing.T, p lcPlan) {
	t.Logf("plan: %s", p) // before anything: a crash prints no cleanup
	base, leaked := settleHandles(), ucs.LeakedHandles()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("plan: %s\nreproduce: %s='%s' go test -run 'TestLifecycleRandom' ./ucp/", p, lcPlanEnv, p)
		}
	})
	e := lcExecute(t, p)
	defer func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("trace:\n  %s", strings.Join(e.trace, "\n  "))
		}
		if t.Failed() {
			e.closeAll()
		}
	}()
	if e.run != nil {
		select {
		case <-e.run.done:
			// ErrClosed: the goroutine first ran after the worker was closed.
			if err := e.run.err; err != nil {
				assert.ErrorIs(t, err, ucs.ErrClosed, "Run's result once its worker was closed")
			}
		case <-time.After(lcStepBound):
			t.Errorf("HANG: Run did not return after its worker was closed")
		}
		e.run.cancel()
	}
	live := waitHandles(base, 5*time.Second)
	assert.Equal(t, base, live, "LEAK: live handles after every handle was closed (%d more than before)", live-base)
	assert.Equal(t, leaked, ucs.LeakedHandles(), "handles counted as leaked although all were closed")
}

// TestLifecycleRandom closes the full set of handles, with an RMA and an AM
// send in flight, in a seeded random sample of orders on shared memory and
// tcp. Each sample is a subtest; its plan is logged first (with -v, so that
// a crash shows it) and again with the command to rerun it if it fails.
// With UCXGO_LIFECYCLE_KNOWN_BUGS=1 the sample is unconstrained (see
// lcRandomPlan) and meets the known library bugs.
func TestLifecycleRandom(t *testing.T) {
	leakcheck.Goroutines(t)
	if s := os.Getenv(lcPlanEnv); s != "" {
		p, err := parseLCPlan(s)
		require.NoError(t, err)
		t.Run("plan", func(t *testing.T) { lcRunClosePlan(t, p) })
		return
	}
	samples := lcDefaultSamples
	if s := os.Getenv(lcSamplesEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "%s=%q", lcSamplesEnv, s)
		samples = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(lcSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q", lcSeedEnv, s)
		seed = n
	}
	free := os.Getenv(lcKnownBugsEnv) != ""
	t.Logf("%s=%d %s=%d %s=%t", lcSeedEnv, seed, lcSamplesEnv, samples, lcKnownBugsEnv, free)
	start := time.Now()
	failed := 0
	pairs := map[[2]string]bool{} // ordered pairs of steps met, for the log
	for tlsBit, tls := range []string{"shm", "tcp"} {
		t.Run(tls, func(t *testing.T) {
			for i := range samples {
				p := lcRandomPlan(rand.New(rand.NewPCG(seed, uint64(2*i+tlsBit))), tls, free)
				for a := range p.steps {
					for b := a + 1; b < len(p.steps); b++ {
						pairs[[2]string{p.steps[a].what, p.steps[b].what}] = true
					}
				}
				if !t.Run(fmt.Sprintf("sample=%d", i), func(t *testing.T) {
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("or: %s=%d %s=%s go test -run 'TestLifecycleRandom/%s/sample=%d$' ./ucp/", lcSeedEnv, seed, lcKnownBugsEnv, os.Getenv(lcKnownBugsEnv), tls, i)
						}
					})
					lcRunClosePlan(t, p)
				}) {
					failed++
				}
			}
		})
	}
	n := len(lcStepNames)
	t.Logf("%d plans in %v, %d failed; %d of the %d ordered pairs of steps met", 2*samples, time.Since(start).Round(time.Millisecond), failed, len(pairs), n*(n-1))
}

// lcNamedPlans are orders worth keeping by name: the order first reported
// and each library bug found, as reproducers. known describes the bug while
// it is open: such plans run only with UCXGO_LIFECYCLE_KNOWN_BUGS=1 (a leak
// fails the binary's final handle count, a hang leaves a goroutine stuck, a
// crash ends the binary) and say so when skipped. drop: handles marked drop
// are never closed and must be collected (TestLifecycleDropped's check);
// settle: after the plan, keep forcing GCs that long (the drain's bound is
// 30 s) to see what the collector does with what is left.
var lcNamedPlans = []struct {
	name, plan string
	drop       bool
	settle     time.Duration
	known      string
}{
	{name: "parents-first/shm",
		plan: "shm listener run=true smem=reg rma=getmem/1048576 am=262144 | ctx rma:complete am:complete sw cw l sep:force cep:force smem cmem rkey"},
	{name: "children-first/tcp",
		plan: "tcp address run=true smem=reg rma=put/1048576 am=262144 | am:200ms rkey cmem smem cep:force-bg rma:complete sep:flush l sw cw ctx"},
	{name: "reported-order/tcp",
		plan: "tcp address run=false smem=alloc rma=get/8 am=64 | cw cep:force smem rma:200ms rkey l ctx sw"},
	{name: "reported-order/shm",
		plan:  "shm address run=false smem=alloc rma=get/8 am=64 | cw cep:force smem rma:200ms rkey l ctx sw",
		known: "leak: an 8-byte get over shm (AM-emulated) to a server that never progresses, without peer error handling: the endpoint's force close (now done at once: keys belong to their worker) does not purge it in UCX 1.18, nothing else can end it, the drain gives up after 30 s, and 3 handles stay live (client worker, context, remote key). With peer error handling (the tcp form) it ends"},
	{name: "reap-releases-last-rkey-reference",
		plan: "shm address run=true smem=reg rma=get/8 am=262144 | rma:detach rkey am:wait cw cep:force sep:force l smem cmem sw ctx"},
	{name: "unmap-target-with-get-in-flight",
		plan: "shm address run=true smem=alloc rma=getmem/1048576 am=64 | smem am:1ms rma:1ms l rkey sw cw ctx cmem sep:flush cep:force-bg"},
	{name: "drop-worker-and-endpoint/tcp", drop: true,
		plan: "tcp address run=true smem=reg rma=get/8 am=64 | rma:complete am:complete cep:drop cw:drop sep:force l rkey smem cmem sw ctx"},
	{name: "drop-worker-and-endpoint/shm-listener", drop: true,
		plan: "shm listener run=true smem=reg rma=get/8 am=64 | rma:complete am:complete cep:drop cw:drop sep:force l rkey smem cmem sw ctx"},
	{name: "ucx-fatal-put-after-force-close/tcp",
		plan:  "tcp address run=true smem=reg rma=put/8 am=64 | rkey ctx rma:complete cep:force l cmem sw smem cw am:wait sep:flush",
		known: "crash, in UCX (the known UCX issue of docs/behaviour.md, met on 1.18.1 in one process, about 1 run in 3, when the client endpoint's force close ran as its put completed locally): the server serves the put and its acknowledgement to the closed endpoint fails: ucp_request.inl:319 Fatal: unexpected error: Endpoint timeout, in ucp_put_handler. Force closes are no longer deferred to a put's completion, and this form did not meet it in 52 runs (1.18.1), nor TestForceCloseRightAfterPuts in 800 force closes; puts over tcp stay out of the random sample"},
	{name: "cancel-in-flight-get",
		// Was a crash in UCX (1.18.1 and 1.23.0~rc1, 4 runs of 4): the get's
		// reply arrived after the endpoint's force close and UCX failed an
		// assertion (flush_ops_count >= 0, in ucp_get_rep_handler). A force
		// close now waits (within its ctx) for the gets in flight.
		plan: "shm listener run=true smem=reg rma=get/1048576 am=64 | rma:detach cep:force sep:force l rkey smem cmem sw ctx cw"},
	{name: "rndv-am-outlives-force-close/shm",
		plan:  "shm address run=false smem=reg rma=put/8 am=262144 | rkey cep:force am:wait sep:force l smem cw sw ctx",
		known: "leak: on shm a rendezvous AM send to a receiver that does not progress is not ended by force-closing its endpoint (on tcp it ends with Request canceled); abandoned, it keeps the closed client worker and the context live for good (2 handles), and its pinned data stays pinned (see pinned-buffer-of-stuck-request)"},
	{name: "drop-worker-after-flush-close/shm", drop: true,
		plan: "shm listener run=true smem=reg rma=get/1048576 am=64 | rma:complete am:complete ctx:drop sw rkey cep:flush sep:force cmem:drop l:drop cw:drop smem"},
	{name: "drop-worker-after-flush-close/tcp", drop: true,
		plan: "tcp address run=true smem=reg rma=put/8 am=64 | rma:complete am:complete sep:flush cmem sw:drop l:drop cw smem ctx cep:drop rkey:drop"},
	{name: "drop-all/tcp", drop: true,
		plan: "tcp listener run=true smem=reg rma=getmem/1048576 am=64 | rma:complete am:complete sep:drop ctx:drop cmem:drop l:drop smem:drop cep:drop rkey:drop cw:drop sw:drop"},
	{name: "drop-all/shm", drop: true,
		plan: "shm listener run=true smem=reg rma=getmem/1048576 am=64 | rma:complete am:complete cmem:drop sw:drop cep:drop rkey:drop cw:drop l:drop smem:drop ctx:drop sep:drop"},
	{name: "pinned-buffer-of-stuck-request", settle: 40 * time.Second,
		plan:  "shm address run=false smem=reg rma=put/8 am=262144 | rkey cep:force am:wait sep:force l smem cw sw ctx",
		known: "leak, no longer a crash: the stuck rendezvous AM of rndv-am-outlives-force-close/shm, then forced GCs: once the drain gives up (30 s) the leaked worker is collected; the AM's pinned []byte stays pinned (pinners keeps every runtime.Pinner reachable), where the runtime used to panic \"runtime.Pinner: found leaking pinned pointer\""},
}

func TestLifecycleNamed(t *testing.T) {
	leakcheck.Goroutines(t)
	for _, np := range lcNamedPlans {
		t.Run(np.name, func(t *testing.T) {
			if np.known != "" && os.Getenv(lcKnownBugsEnv) == "" {
				t.Skipf("KNOWN LIBRARY BUG (reported, still open), not run without %s=1: %s", lcKnownBugsEnv, np.known)
			}
			if np.known != "" {
				t.Logf("KNOWN LIBRARY BUG: %s", np.known)
			}
			// Forced GCs after the plan, also when it failed (a leak): what
			// the collector does with leaked handles must not crash.
			t.Cleanup(func() {
				for end := time.Now().Add(np.settle); time.Now().Before(end); {
					runtime.GC()
					time.Sleep(50 * time.Millisecond)
				}
			})
			p, err := parseLCPlan(np.plan)
			require.NoError(t, err)
			if np.drop {
				lcRunDropPlan(t, p, "")
			} else {
				lcRunClosePlan(t, p)
			}
		})
	}
}

// lcDropPlan completes both requests, then closes some handles in a random
// order and drops the others. The drop-* plans of lcNamedPlans were leaks
// once: a worker dropped with requests abandoned to it (an endpoint's close
// that gave up on its ctx, or that its cleanup handed over) was never
// drained; collectWorker drains it now.
func lcDropPlan(r *rand.Rand, tls, connect string) lcPlan {
	p := lcPlan{
		tls: tls, connect: connect, run: true, smem: "reg",
		rma:     pick(r, "get", "put", "getmem", "putmem"),
		rmaSize: pick(r, 8, 1<<20),
		amSize:  pick(r, 64, 256<<10),
		steps:   []lcStep{{"rma", "complete"}, {"am", "complete"}},
	}
	if tls == "tcp" {
		p.rma = pick(r, "get", "getmem") // see ucx-fatal-put-after-force-close
	}
	drop := map[string]bool{}
	for _, w := range lcStepNames {
		drop[w] = w != "rma" && w != "am" && r.IntN(2) == 0
	}
	for _, pair := range [][2]string{{"cw", "cep"}, {"sw", "sep"}} {
		if drop[pair[0]] && drop[pair[1]] {
			drop[pair[r.IntN(2)]] = false
		}
	}
	for _, i := range r.Perm(len(lcStepNames)) {
		s := lcStep{what: lcStepNames[i]}
		switch {
		case s.what == "rma" || s.what == "am":
			continue
		case drop[s.what]:
			s.how = "drop"
		case s.what == "sep" || s.what == "cep":
			s.how = pick(r, "force", "force-bg", "flush")
		}
		p.steps = append(p.steps, s)
	}
	return p
}

// lcExecuteAndDrop runs p and stops the server's Run; its handles are
// unreachable once it returns. It reports how many were never closed.
//
//go:noinline
func lcExecuteAndDrop(t *testing.T, p lcPlan) int {
	e := lcExecute(t, p)
	if e.run != nil {
		e.run.cancel() // Run holds its worker
		select {
		case <-e.run.done:
		case <-time.After(lcStepBound):
			t.Fatal("HANG: Run did not return once its ctx was cancelled")
		}
	}
	n := 0
	for _, s := range p.steps {
		if s.how == "drop" {
			n++
		}
	}
	return n
}

// TestLifecycleDropped drops a random part of the handles without Close and
// closes the rest in a random order: forced GCs must release every dropped
// one through its cleanup or finalizer, and count it leaked. (Dropping all
// of them meets a known bug: drop-all in lcNamedPlans.)
func TestLifecycleDropped(t *testing.T) {
	leakcheck.Goroutines(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(lcSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q", lcSeedEnv, s)
		seed = n
	}
	t.Logf("%s=%d", lcSeedEnv, seed)
	if s := os.Getenv(lcPlanEnv); s != "" {
		p, err := parseLCPlan(s)
		require.NoError(t, err)
		t.Run("plan", func(t *testing.T) { lcRunDropPlan(t, p, "") })
		return
	}
	samples := lcDefaultDropSamples
	if s := os.Getenv(lcSamplesEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "%s=%q", lcSamplesEnv, s)
		samples = max(1, n/10)
	}
	for tlsBit, tls := range []string{"shm", "tcp"} {
		for connBit, connect := range []string{"listener", "address"} {
			for i := range samples {
				p := lcDropPlan(rand.New(rand.NewPCG(seed, uint64(4*i+2*tlsBit+connBit))), tls, connect)
				name := fmt.Sprintf("%s/%s/sample=%d", tls, connect, i)
				t.Run(name, func(t *testing.T) {
					lcRunDropPlan(t, p, fmt.Sprintf("%s=%d go test -run 'TestLifecycleDropped/%s$' ./ucp/", lcSeedEnv, seed, name))
				})
			}
		}
	}
}

func lcRunDropPlan(t *testing.T, p lcPlan, rerun string) {
	t.Logf("plan: %s", p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce: %s='%s' go test -run 'TestLifecycleDropped' ./ucp/", lcPlanEnv, p)
			if rerun != "" {
				t.Logf("or: %s", rerun)
			}
		}
	})
	base, leaked := settleHandles(), ucs.LeakedHandles()
	dropped := lcExecuteAndDrop(t, p)
	live := waitHandles(base, 10*time.Second)
	assert.Equal(t, base, live, "LEAK: live handles after dropping %d and forcing GCs (%d more than before)", dropped, live-base)
	assert.Equal(t, leaked+int64(dropped), ucs.LeakedHandles(), "handles counted as leaked: the %d dropped", dropped)
}
