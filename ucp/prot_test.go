package ucp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// Protection flags (UCP_MEM_MAP_PROT_*) requested at map time, measured per
// transport: a peer puts into memory mapped remote-read only and gets from
// memory mapped remote-write only. The target and the peer are child
// processes, so a fault raised by an enforcing transport can only kill a
// child. An LD_PRELOAD spy in the target records what ucp_mem_map was
// given (the binding's part is to pass the flags), and UCX_PROTO_INFO in the
// peer says which transport moved the data. Measured on 1.18.1: no
// transport here enforces them; UCX's ucp_mem_map never reads the prot
// field (read in the 1.18.1 and 1.23-development sources): a memory domain's access
// flags follow the context's features (UCP_FEATURE_RMA: remote read and
// write), so not even RDMA hardware would be asked to enforce them.

const (
	protTLSEnv  = "UCXGO_PROT_TLS"  // the transports of both children
	protLineEnv = "UCXGO_PROT_LINE" // the target's line, for the peer
	protSize    = 64 << 10
	protFillRO  = 0xa5 // remote-read-only region
	protFillWO  = 0x5a // remote-write-only region
	protPutByte = 0x33
	roProt      = ucp.ProtLocalRead | ucp.ProtLocalWrite | ucp.ProtRemoteRead
	woProt      = ucp.ProtLocalRead | ucp.ProtLocalWrite | ucp.ProtRemoteWrite
)

func init() {
	testproc.Role("prot-target", protTarget)
	testproc.Role("prot-peer", protPeer)
	testproc.Role("prot-self", protSelf)
}

// protTransports are the transports measured, as UCX_TLS names them with
// what each needs besides (cma moves data only; tcp carries the rest), and
// whether UCX allows peer error handling on them.
var protTransports = []struct {
	name, tls string
	peerErr   bool
}{
	{"posix", "posix", false},
	{"sysv", "sysv", false},
	{"tcp", "tcp", true},
	{"cma", "cma,tcp", false},
	{"self", "self", false},
}

// protResults is where a child writes its result lines: fd 3
// (testproc.Spec.ResultsFD), apart from UCX's output.
func protResults() io.Writer { return os.NewFile(3, "results") }

type protRegions struct{ ro, wo *ucp.Mem }

func mapProtRegions(ctx *ucp.Context) (protRegions, error) {
	ro, err := ctx.Allocate(protSize, ucp.WithProt(roProt))
	if err != nil {
		return protRegions{}, err
	}
	wo, err := ctx.Allocate(protSize, ucp.WithProt(woProt))
	if err != nil {
		return protRegions{}, err
	}
	for _, r := range []struct {
		m    *ucp.Mem
		fill byte
	}{{ro, protFillRO}, {wo, protFillWO}} {
		b, err := r.m.Bytes()
		if err != nil {
			return protRegions{}, err
		}
		for i := range b {
			b[i] = r.fill
		}
	}
	return protRegions{ro, wo}, nil
}

// line is what the target tells the peer: its worker address and, per
// region, the address and packed rkey.
func (r protRegions) line(w *ucp.Worker) (string, error) {
	addr, err := w.PackAddress()
	if err != nil {
		return "", err
	}
	line := "PROT " + hex.EncodeToString(addr)
	for _, m := range []*ucp.Mem{r.ro, r.wo} {
		packed, err := m.PackRemoteKey()
		if err != nil {
			return "", err
		}
		line += fmt.Sprintf(" %d %s", m.Address(), hex.EncodeToString(packed))
	}
	return line, nil
}

// check says whether each region still holds its fill.
func (r protRegions) check() string {
	state := func(m *ucp.Mem, fill byte) string {
		b, err := m.Bytes()
		switch {
		case err != nil:
			return "error"
		case bytes.Count(b, []byte{fill}) == len(b):
			return "unchanged"
		}
		return "changed"
	}
	return fmt.Sprintf("CHECK ro %s wo %s", state(r.ro, protFillRO), state(r.wo, protFillWO))
}

func childFail(role string, err error) int {
	fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
	return 1
}

// protTarget maps the regions, writes its line, progresses, and answers
// each "check" on stdin with the regions' state.
func protTarget() int {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", os.Getenv(protTLSEnv)))
	if err != nil {
		return childFail("prot-target", err)
	}
	w, err := ctx.NewWorker()
	if err != nil {
		return childFail("prot-target", err)
	}
	r, err := mapProtRegions(ctx)
	if err != nil {
		return childFail("prot-target", err)
	}
	line, err := r.line(w)
	if err != nil {
		return childFail("prot-target", err)
	}
	run, stop := context.WithCancel(context.Background())
	defer stop()
	go w.Run(run)
	out := protResults()
	fmt.Fprintln(out, line)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "check" {
			fmt.Fprintln(out, r.check())
		}
	}
	return 0
}

// protOps puts into the read-only region and gets from the write-only one,
// writing "PUT ok", "PUT error <text>", "GET ok data" (the region's bytes
// were read), "GET ok other-bytes" or "GET error <text>".
func protOps(ep *ucp.Endpoint, line string, out io.Writer) int {
	f := strings.Fields(line)
	if len(f) != 6 {
		return childFail("prot", fmt.Errorf("bad line %q", line))
	}
	wait := func(req ucp.Request, err error) error {
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return req.Wait(ctx)
	}
	rkey := func(addr, packed string) (uint64, *ucp.RemoteKey, error) {
		a, err := strconv.ParseUint(addr, 10, 64)
		if err != nil {
			return 0, nil, err
		}
		b, err := hex.DecodeString(packed)
		if err != nil {
			return 0, nil, err
		}
		rk, err := ep.UnpackRemoteKey(context.Background(), b)
		return a, rk, err
	}
	roAddr, roKey, err := rkey(f[2], f[3])
	if err == nil {
		err = wait(putAt(bytes.Repeat([]byte{protPutByte}, protSize), roAddr, roKey))
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = ep.Flush(ctx)
		cancel()
	}
	if err != nil {
		fmt.Fprintln(out, "PUT error", err)
	} else {
		fmt.Fprintln(out, "PUT ok")
	}
	got := make([]byte, protSize)
	woAddr, woKey, err := rkey(f[4], f[5])
	if err == nil {
		err = wait(getAt(got, woAddr, woKey))
	}
	switch {
	case err != nil:
		fmt.Fprintln(out, "GET error", err)
	case bytes.Count(got, []byte{protFillWO}) == len(got):
		fmt.Fprintln(out, "GET ok data")
	default:
		fmt.Fprintln(out, "GET ok other-bytes")
	}
	return 0
}

// protPeer connects to the target of protLineEnv and runs protOps.
func protPeer() int {
	tls := os.Getenv(protTLSEnv)
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", tls))
	if err != nil {
		return childFail("prot-peer", err)
	}
	w, err := ctx.NewWorker()
	if err != nil {
		return childFail("prot-peer", err)
	}
	run, stop := context.WithCancel(context.Background())
	defer stop()
	go w.Run(run)
	line := os.Getenv(protLineEnv)
	addr, err := hex.DecodeString(strings.Fields(line + " -")[1])
	if err != nil {
		return childFail("prot-peer", err)
	}
	peerErr := false
	for _, tr := range protTransports {
		if tr.tls == tls {
			peerErr = tr.peerErr
		}
	}
	ep, err := w.ConnectWorker(addr, ucp.WithPeerErrorHandling(peerErr))
	if err != nil {
		return childFail("prot-peer", err)
	}
	return protOps(ep, line, protResults())
}

// protSelf is target and peer in one process, over an endpoint to its own
// worker: the self transport's only use.
func protSelf() int {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", "self"))
	if err != nil {
		return childFail("prot-self", err)
	}
	w, err := ctx.NewWorker()
	if err != nil {
		return childFail("prot-self", err)
	}
	r, err := mapProtRegions(ctx)
	if err != nil {
		return childFail("prot-self", err)
	}
	line, err := r.line(w)
	if err != nil {
		return childFail("prot-self", err)
	}
	run, stop := context.WithCancel(context.Background())
	defer stop()
	go w.Run(run)
	addr, err := w.PackAddress()
	if err != nil {
		return childFail("prot-self", err)
	}
	ep, err := w.ConnectWorker(addr, ucp.WithPeerErrorHandling(false))
	if err != nil {
		return childFail("prot-self", err)
	}
	out := protResults()
	if code := protOps(ep, line, out); code != 0 {
		return code
	}
	fmt.Fprintln(out, r.check())
	return 0
}

// buildProtSpy compiles testdata/protspy.c against the UCX headers cgo uses.
func buildProtSpy(t *testing.T) string {
	out := filepath.Join(t.TempDir(), "protspy.so")
	flags, err := exec.Command("pkg-config", "--cflags", "ucx").Output()
	require.NoError(t, err, "pkg-config --cflags ucx")
	args := append([]string{"-shared", "-fPIC", "-o", out, "testdata/protspy.c"}, strings.Fields(string(flags))...)
	b, err := exec.Command("gcc", append(args, "-ldl")...).CombinedOutput()
	require.NoError(t, err, "building the ucp_mem_map spy: %s", b)
	return out
}

// startProtChild starts a child of the probe in role, with env added to
// its environment; its result lines are those it writes to fd 3.
func startProtChild(t *testing.T, role string, env ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Spec{Role: role, Env: env, ResultsFD: true})
}

// protResult is c's next result line, or "" once c has ended.
func protResult(t *testing.T, c *testproc.Proc) string {
	t.Helper()
	l, _ := c.NextLine(t, 60*time.Second)
	return l
}

// protOutcome is what one transport did.
type protOutcome struct {
	put, get           string // "refused: ...", "not enforced: ..."
	putVia, getVia     string // the transport UCX chose for 64 KiB
	crash              string // which process a signal killed
	spy                string // the protection of the target's 64 KiB ucp_mem_map calls
	results, targetOut string // for the log
}

// UCX prints its protocol choices to its log stream, here stderr (part of
// the child's Output, as the spy's lines are); stderr is unbuffered, so
// nothing is lost when the child exits.
const (
	protoInfo     = "UCX_PROTO_INFO=y"
	protoInfoFile = "UCX_LOG_FILE=stderr"
)

var spyLine = regexp.MustCompile(`protspy: length (\d+) prot (\S+)`)

// protoVia reads UCX_PROTO_INFO's table for the operation titled what and
// returns the transport of the row whose size range holds n.
func protoVia(info, what string, n int) string {
	var in bool
	for _, l := range strings.Split(info, "\n") {
		if strings.Contains(l, what) {
			in = true
			continue
		}
		if !in {
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) < 4 {
			if strings.Contains(l, "+--") {
				continue
			}
			break
		}
		lo, hi, ok := strings.Cut(strings.TrimSpace(cells[1]), "..")
		if !ok {
			continue
		}
		if sizeOf(lo) <= n && (hi == "inf" || n <= sizeOf(hi)) {
			return strings.TrimSpace(cells[len(cells)-2]) + " (" + strings.TrimSpace(cells[2]) + ")"
		}
	}
	return "not reported"
}

// sizeOf parses UCX's sizes: 1400, 8K, 1M.
func sizeOf(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n * mult
}

func runProtProbe(t *testing.T, tls, spy string) protOutcome {
	var o protOutcome
	var lines []string
	var target, peer *testproc.Proc
	if tls == "self" {
		target = startProtChild(t, "prot-self", "LD_PRELOAD="+spy, protoInfo, protoInfoFile)
		peer = target
		for range 3 { // PUT, GET, CHECK
			lines = append(lines, protResult(t, target))
		}
		if sig := target.Signal(t, 60*time.Second); sig != "" {
			o.crash = "the process: " + sig
		}
	} else {
		target = startProtChild(t, "prot-target", protTLSEnv+"="+tls, "LD_PRELOAD="+spy)
		line := protResult(t, target)
		require.True(t, strings.HasPrefix(line, "PROT "), "target said %q; output:\n%s", line, target.Output())
		peer = startProtChild(t, "prot-peer", protTLSEnv+"="+tls, protLineEnv+"="+line, protoInfo, protoInfoFile)
		lines = append(lines, protResult(t, peer), protResult(t, peer))
		if sig := peer.Signal(t, 60*time.Second); sig != "" {
			o.crash = "the peer: " + sig
		}
		if _, err := fmt.Fprintln(target.Stdin(), "check"); err == nil {
			lines = append(lines, protResult(t, target))
		}
		target.CloseStdin()
		if sig := target.Signal(t, 60*time.Second); sig != "" {
			o.crash += " the target: " + sig
		}
	}
	o.results, o.targetOut = strings.Join(lines, "; "), target.Output()
	for _, m := range spyLine.FindAllStringSubmatch(target.Output(), -1) {
		if m[1] == strconv.Itoa(protSize) {
			o.spy = strings.TrimSpace(o.spy + " " + m[2])
		}
	}
	info := peer.Output()
	o.putVia = protoVia(info, "remote memory write by ucp_put", protSize)
	o.getVia = protoVia(info, "remote memory read by ucp_get", protSize)
	var putOK bool
	for _, l := range lines {
		switch {
		case l == "PUT ok":
			putOK = true
		case strings.HasPrefix(l, "PUT error "):
			o.put = "refused: " + strings.TrimPrefix(l, "PUT error ")
		case strings.HasPrefix(l, "GET error "):
			o.get = "refused: " + strings.TrimPrefix(l, "GET error ")
		case l == "GET ok data":
			o.get = "not enforced: the data was read"
		case l == "GET ok other-bytes":
			o.get = "completed, but other bytes were read"
		case putOK && strings.HasPrefix(l, "CHECK ro changed"):
			o.put = "not enforced: the data changed"
		case putOK && strings.HasPrefix(l, "CHECK ro unchanged"):
			o.put = "completed, but the data did not change"
		}
	}
	return o
}

// Which transports honour the protection requested at map time. The
// binding's part: the flags reach ucp_mem_map, and whatever UCX does ends
// in a refusal or an unenforced success, never in a crash of this process.
func TestProtectionFlagsPerTransport(t *testing.T) {
	leakcheck.Goroutines(t)
	reports, err := uct.Probe()
	require.NoError(t, err)
	mds := map[string]bool{}
	for _, r := range reports {
		mds[r.MD] = r.MD != ""
	}
	spy := buildProtSpy(t)
	var table []string
	for _, tr := range protTransports {
		t.Run(tr.name, func(t *testing.T) {
			if !mds[tr.name] {
				t.Skipf("needs the %q memory domain; uct.Probe found %v", tr.name, mds)
			}
			o := runProtProbe(t, tr.tls, spy)
			t.Logf("results: %s; put via %s, get via %s; target output:\n%s", o.results, o.putVia, o.getVia, o.targetOut)
			table = append(table, fmt.Sprintf("| %s | %s | %s | %s | %s |", tr.name, o.putVia, o.put, o.getVia, o.get))
			assert.Empty(t, o.crash, "a child process was killed")
			assert.Equal(t, fmt.Sprintf("0x%x 0x%x", int(roProt), int(woProt)), o.spy,
				"ucp_mem_map got UCP_MEM_MAP_PARAM_FIELD_PROT with the protection asked for")
			assert.Regexp(t, `^(refused: .+|not enforced: the data changed)$`, o.put, "put into remote-read-only memory")
			assert.Regexp(t, `^(refused: .+|not enforced: the data was read)$`, o.get, "get from remote-write-only memory")
		})
	}
	t.Logf("protection requested at map time, per transport, 64 KiB operations (UCX %s):\n"+
		"| transport | put carried by | put into remote-read-only memory | get carried by | get from remote-write-only memory |\n"+
		"| --- | --- | --- | --- | --- |\n%s", ucs.LoadedVersion().String(), strings.Join(table, "\n"))
}
