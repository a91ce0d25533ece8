package ucs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// TestMain runs the child roles of the log tests (testproc.Main).
func TestMain(m *testing.M) {
	testproc.Main()
	os.Exit(m.Run())
}

func init() {
	testproc.Role("log-quiet", roleLogQuiet)
	testproc.Role("log-keys", roleLogKeys)
	testproc.Role("log-concurrent", roleLogConcurrent)
	testproc.Role("log-fatal", roleLogFatal)
}

// hang is the guard against a line that never arrives; no test measures
// how long anything takes.
const hang = 60 * time.Second

// recorder is a slog.Handler keeping every record; with gate set, Handle
// first waits for the gate to close (a logger slower than UCX).
type recorder struct {
	gate chan struct{}

	mu   sync.Mutex
	recs []slog.Record
	more chan struct{}
}

func newRecorder() *recorder { return &recorder{more: make(chan struct{})} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	close(r.more)
	r.more = make(chan struct{})
	return nil
}

func (r *recorder) records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

// find waits for a record whose message holds substr.
func (r *recorder) find(substr string, timeout time.Duration) (slog.Record, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, rec := range r.recs {
			if strings.Contains(rec.Message, substr) {
				r.mu.Unlock()
				return rec, true
			}
		}
		more := r.more
		r.mu.Unlock()
		select {
		case <-more:
		case <-deadline.C:
			return slog.Record{}, false
		}
	}
}

// waitCount waits until n records arrived.
func (r *recorder) waitCount(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		have, more := len(r.recs), r.more
		r.mu.Unlock()
		if have >= n {
			return true
		}
		select {
		case <-more:
		case <-deadline.C:
			return false
		}
	}
}

func attrs(rec slog.Record) map[string]slog.Value {
	m := map[string]slog.Value{}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
	return m
}

// recordText is everything a handler could print of rec.
func recordText(rec slog.Record) string {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.String())
		return true
	})
	return b.String()
}

func newMarker() string { return "ucxgo-log-marker-" + rand.Text()[:12] }

// provokeError makes UCX log an ERROR line holding marker: UCX's
// configuration parser says "Invalid value for RNDV_THRESH: '<marker>'"
// (ucs_config_parser_parse_field in parser.c, every supported release),
// and NewContext fails.
func provokeError(marker string) error {
	c, err := ucp.NewContext(ucp.WithConfig("RNDV_THRESH", marker))
	if err == nil {
		c.Close()
		return fmt.Errorf("NewContext took RNDV_THRESH=%q", marker)
	}
	return nil
}

func TestSetLoggerRoutesUCXErrorLine(t *testing.T) {
	rec := newRecorder()
	ucs.SetLogger(slog.New(rec))
	t.Cleanup(ucs.ResetLogger)

	marker := newMarker()
	require.NoError(t, provokeError(marker))
	r, ok := rec.find(marker, hang)
	require.True(t, ok, "UCX's error line did not reach the logger; it got %d records", len(rec.records()))

	assert.Equal(t, slog.LevelError, r.Level)
	assert.Contains(t, r.Message, "Invalid value for RNDV_THRESH")
	a := attrs(r)
	assert.Equal(t, "ERROR", a[ucs.LogKeyLevel].String())
	assert.Equal(t, "parser.c", a[ucs.LogKeyFile].String())
	require.Equal(t, slog.KindInt64, a[ucs.LogKeyLine].Kind())
	assert.Positive(t, a[ucs.LogKeyLine].Int64())
	assert.Equal(t, "ucs_config_parser_parse_field", a[ucs.LogKeyFunc].String())
	assert.Equal(t, "UCX", a[ucs.LogKeyComponent].String())
	_, dropped := a[ucs.LogKeyDropped]
	assert.False(t, dropped, "no line was dropped")
	assert.False(t, r.Time.IsZero())
	assert.False(t, strings.HasSuffix(r.Message, "\n"))
}

func TestSetLoggerNilFollowsSlogDefault(t *testing.T) {
	rec := newRecorder()
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(old) })
	ucs.SetLogger(nil)
	t.Cleanup(ucs.ResetLogger)

	marker := newMarker()
	require.NoError(t, provokeError(marker))
	r, ok := rec.find(marker, hang)
	require.True(t, ok, "UCX's error line did not reach slog.Default()")
	assert.Equal(t, slog.LevelError, r.Level)
}

// A logger that cannot keep up loses lines, counted, instead of holding
// up the threads that log.
func TestSlowLoggerDropsAndCounts(t *testing.T) {
	rec := newRecorder()
	rec.gate = make(chan struct{})
	released := false
	release := func() {
		if !released {
			released = true
			close(rec.gate)
		}
	}
	t.Cleanup(release)
	ucs.SetLogger(slog.New(rec))
	t.Cleanup(ucs.ResetLogger)

	before := ucs.LogsDropped()
	// The first line holds the delivering goroutine in Handle; the ring
	// then fills and the next line finds it full.
	var n int
	for n = 0; n < 100000 && ucs.LogsDropped() == before; n++ {
		require.NoError(t, provokeError("ucxgo-log-flood"))
	}
	require.Greater(t, ucs.LogsDropped(), before, "no line was dropped after %d lines with the logger stuck", n)
	release()
	// The next line must find room: wait for the lines the ring took.
	accepted := n - int(ucs.LogsDropped()-before)
	require.True(t, rec.waitCount(accepted, hang), "%d of the %d lines the ring took were delivered", len(rec.records()), accepted)

	marker := newMarker()
	require.NoError(t, provokeError(marker))
	r, ok := rec.find(marker, hang)
	require.True(t, ok, "the line after the drops did not arrive (%d records, %d dropped)", len(rec.records()), ucs.LogsDropped()-before)
	a := attrs(r)
	require.Contains(t, a, ucs.LogKeyDropped, "the first line after drops carries their count")
	assert.Equal(t, ucs.LogsDropped()-before, a[ucs.LogKeyDropped].Uint64())
	for _, other := range rec.records() {
		if other.Message != r.Message {
			_, has := attrs(other)[ucs.LogKeyDropped]
			assert.False(t, has, "only the line after the drops carries a count: %s", recordText(other))
		}
	}
	t.Logf("%d lines logged with the logger stuck, %d dropped", n, ucs.LogsDropped()-before)
}

// SetLogger and ResetLogger from several goroutines while UCX logs: each
// line goes once, to the logger or to UCX's own printing (or is counted as
// dropped), and the race detector (the child is this -race binary) sees no
// race. Run in a child process, whose output holds UCX's printing.
func TestSetLoggerConcurrent(t *testing.T) {
	p := testproc.Start(t, testproc.Spec{Role: "log-concurrent", ResultsFD: true})
	routed := map[string]int{}
	var dropped int
	for {
		l, ok := p.NextLine(t, hang)
		require.True(t, ok, "the child ended before DONE:\n%s", p.Output())
		kind, rest, _ := strings.Cut(l, " ")
		if kind == "FAIL" {
			t.Fatalf("child: %s\n%s", rest, p.Output())
		}
		if kind == "DROPPED" {
			var err error
			dropped, err = strconv.Atoi(rest)
			require.NoError(t, err)
		}
		if kind == "ROUTED" {
			routed[rest]++
		}
		if kind == "DONE" {
			break
		}
	}
	require.Equal(t, 0, p.Wait(t, hang), p.Output())
	out := p.Output()
	missing, twice, toLogger := 0, 0, 0
	for i := range concurrentLines {
		m := fmt.Sprintf("'ucxgo-log-concurrent-%d'", i)
		n := routed[m] + strings.Count(out, m)
		toLogger += routed[m]
		switch {
		case n == 0:
			missing++
		case n > 1:
			twice++
			t.Errorf("line %d delivered %d times (%d to the logger)", i, n, routed[m])
		}
	}
	assert.Equal(t, dropped, missing, "lines neither delivered nor printed, beyond those counted as dropped")
	assert.Zero(t, twice)
	t.Logf("%d lines: %d to the logger, %d printed by UCX, %d dropped", concurrentLines, toLogger, concurrentLines-toLogger-missing, missing)
}

const concurrentLines = 300

func roleLogConcurrent() int {
	res := os.NewFile(3, "results")
	rec := newRecorder()
	before := ucs.LogsDropped()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := slog.New(rec)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if i%2 == 0 {
					ucs.SetLogger(l)
				} else {
					ucs.ResetLogger()
				}
				_ = ucs.LogsDropped()
				runtime.Gosched()
			}
		}()
	}
	l := slog.New(rec)
	for i := range concurrentLines {
		switch i % 4 { // both ways in any case, whatever the scheduling
		case 0:
			ucs.SetLogger(l)
		case 2:
			ucs.ResetLogger()
		}
		if err := provokeError(fmt.Sprintf("ucxgo-log-concurrent-%d", i)); err != nil {
			fmt.Fprintln(res, "FAIL", err)
			return 1
		}
	}
	close(stop)
	wg.Wait()

	// The lines are delivered in order: once the last marker arrived,
	// every routed line did.
	ucs.SetLogger(slog.New(rec))
	marker := newMarker()
	if err := provokeError(marker); err != nil {
		fmt.Fprintln(res, "FAIL", err)
		return 1
	}
	if _, ok := rec.find(marker, hang); !ok {
		fmt.Fprintln(res, "FAIL routing does not work after concurrent SetLogger and ResetLogger")
		return 1
	}
	ucs.ResetLogger()
	for _, r := range rec.records() {
		if i := strings.Index(r.Message, "'ucxgo-log-concurrent-"); i >= 0 {
			m, _, _ := strings.Cut(r.Message[i+1:], "'")
			fmt.Fprintf(res, "ROUTED '%s'\n", m)
		}
	}
	fmt.Fprintf(res, "DROPPED %d\nDONE\n", ucs.LogsDropped()-before)
	return 0
}

// With a logger set, UCX prints nothing of the lines it routes (UCX prints
// to stdout by default; both stdout and stderr are checked); after
// ResetLogger it prints them itself again. Run in a child process whose
// output is captured.
func TestLoggerSilencesUCXOutputUntilReset(t *testing.T) {
	routed, printed := newMarker(), newMarker()
	p := testproc.Start(t, testproc.Spec{Role: "log-quiet", ResultsFD: true,
		Env: []string{"UCXGO_LOG_ROUTED=" + routed, "UCXGO_LOG_PRINTED=" + printed}})
	line := p.WaitLine(t, "ROUTED", hang)
	assert.Equal(t, "level=ERROR ucx_level=ERROR ucx_file=parser.c", line)
	p.WaitLine(t, "DONE", hang)
	require.Equal(t, 0, p.Wait(t, hang), p.Output())

	out := p.Output() // the child's stdout and stderr
	assert.NotContains(t, out, routed, "a routed line reached the process's stdout or stderr")
	assert.Contains(t, out, printed, "after ResetLogger UCX prints the line itself")
	assert.Contains(t, out, "Invalid value for RNDV_THRESH: '"+printed+"'")
}

func roleLogQuiet() int {
	res := os.NewFile(3, "results")
	rec := newRecorder()
	ucs.SetLogger(slog.New(rec))
	if err := provokeError(os.Getenv("UCXGO_LOG_ROUTED")); err != nil {
		fmt.Fprintln(res, "FAIL", err)
		return 1
	}
	r, ok := rec.find(os.Getenv("UCXGO_LOG_ROUTED"), hang)
	if !ok {
		fmt.Fprintln(res, "FAIL the line was not routed")
		return 1
	}
	a := attrs(r)
	fmt.Fprintf(res, "ROUTED level=%s ucx_level=%s ucx_file=%s\n", r.Level, a[ucs.LogKeyLevel], a[ucs.LogKeyFile])
	ucs.ResetLogger()
	if err := provokeError(os.Getenv("UCXGO_LOG_PRINTED")); err != nil {
		fmt.Fprintln(res, "FAIL", err)
		return 1
	}
	fmt.Fprintln(res, "DONE")
	return 0
}

// A line UCX treats as fatal (here an ERROR line, with
// UCX_LOG_LEVEL_TRIGGER=error) is left to UCX, which prints it and aborts
// the process; the lines still waiting for the logger (a stuck one, here)
// are written to stderr first.
func TestFatalLineLeftToUCX(t *testing.T) {
	marker := newMarker()
	p := testproc.Start(t, testproc.Spec{Role: "log-fatal", ResultsFD: true,
		Env: []string{"UCX_LOG_LEVEL=debug", "UCX_LOG_LEVEL_TRIGGER=error", "UCX_HANDLE_ERRORS=none",
			"UCXGO_LOG_FATAL=" + marker}})
	p.WaitLine(t, "PENDING", hang)
	code := p.Wait(t, hang)
	out := p.Output()
	require.NotEqual(t, 0, code, "the process went on after a fatal line:\n%s", out)
	assert.Contains(t, out, "Invalid value for RNDV_THRESH: '"+marker+"'", "UCX printed the fatal line itself")
	assert.Contains(t, out, "ucx-go: UCX DEBUG ", "the lines waiting for the logger went to stderr")
	_, after, _ := strings.Cut(out, "ucx-go: UCX DEBUG ")
	assert.Regexp(t, `^[^ \n]+\.c:[0-9]+ `, after, "file:line, then the message")
}

func roleLogFatal() int {
	res := os.NewFile(3, "results")
	rec := newRecorder()
	rec.gate = make(chan struct{}) // never opened: the lines stay in the ring
	ucs.SetLogger(slog.New(rec))
	c, err := ucp.NewContext() // UCX logs DEBUG lines
	if err != nil {
		fmt.Fprintln(res, "FAIL", err)
		return 1
	}
	defer c.Close()
	fmt.Fprintln(res, "PENDING")
	provokeError(os.Getenv("UCXGO_LOG_FATAL")) // aborts
	fmt.Fprintln(res, "FAIL the process survived a fatal line")
	return 0
}

// UCX's DEBUG logging, routed through the logger, while memory holding a
// secret is mapped, its remote key packed, unpacked and used for a put and
// a get: no record holds the key's bytes or the secret's, in hex (as UCX
// dumps bytes) or raw. UCX's own output after ResetLogger is checked the
// same way. DEBUG is the most verbose level that can pass: at TRACE, UCX
// 1.19 to 1.23 dump each packed remote key in hex ("rkey 2c006c34:... for
// md[2]=sysv", ucp_rkey.c), which this test, run at TRACE, reports.
func TestLoggedLinesHoldNoKeyBytes(t *testing.T) {
	p := testproc.Start(t, testproc.Spec{Role: "log-keys", ResultsFD: true,
		Env: []string{"UCX_LOG_LEVEL=debug"}})
	var key, secret []byte
	var recs []string
	levels := map[string]int{}
	var dropped uint64
	for {
		l, ok := p.NextLine(t, hang)
		require.True(t, ok, "the child ended before DONE:\n%s", p.Output())
		kind, rest, _ := strings.Cut(l, " ")
		var err error
		switch kind {
		case "KEY":
			key, err = hex.DecodeString(rest)
		case "SECRET":
			secret, err = hex.DecodeString(rest)
		case "LOG":
			var r struct{ Level, Text string }
			err = json.Unmarshal([]byte(rest), &r)
			levels[r.Level]++
			recs = append(recs, r.Text)
		case "DROPPED":
			dropped, err = strconv.ParseUint(rest, 10, 64)
		case "FAIL":
			t.Fatalf("child: %s\n%s", rest, p.Output())
		}
		require.NoError(t, err, l)
		if kind == "DONE" {
			break
		}
	}
	require.Equal(t, 0, p.Wait(t, hang))
	require.NotEmpty(t, key)
	require.Len(t, secret, 64)
	require.Positive(t, levels["DEBUG"], "UCX_LOG_LEVEL=debug routed no DEBUG line: the test would prove nothing (levels seen: %v)", levels)
	require.Positive(t, levels["ERROR"], "the marker error line did not arrive")
	require.Zero(t, dropped, "lines were dropped: the check would miss what they held")
	t.Logf("%d records checked (%v), packed key %d bytes", len(recs), levels, len(key))

	all := append(probes(key, "packed key"), probes(secret, "secret")...)
	require.NotEmpty(t, probes(key, "packed key"), "the key %x has no distinctive 8 bytes to look for", key)
	for _, probe := range all { // the search finds what it looks for
		require.True(t, probe.in("rkey "+dumpHex(key)+" "+dumpHex(secret)+" md[0]"), probe.what)
	}
	texts := append(recs, p.Output())
	for _, probe := range all {
		for _, text := range texts {
			if probe.in(text) {
				t.Errorf("%s appears in logged text: %q", probe.what, text)
				break
			}
		}
	}
}

// probe is a run of bytes looked for in text: hex as UCX prints bytes
// (ucs_str_dump_hex puts ':' every 4 bytes), plain hex, or raw.
type probe struct {
	what string
	b    []byte
}

// probes are the 8-byte windows of b with at least 5 distinct bytes: too
// long and too varied to occur by chance, and never a zero-padded number
// that some other value could print as.
func probes(b []byte, what string) []probe {
	var out []probe
	for i := 0; i+8 <= len(b); i++ {
		w := b[i : i+8]
		distinct := map[byte]bool{}
		for _, c := range w {
			distinct[c] = true
		}
		if len(distinct) >= 5 {
			out = append(out, probe{fmt.Sprintf("%s bytes %d..%d (%x)", what, i, i+8, w), w})
		}
	}
	return out
}

// dumpHex writes b as UCX dumps bytes in its logs: two hex digits a byte,
// ':' after every 4.
func dumpHex(b []byte) string {
	var s strings.Builder
	for i, c := range b {
		if i > 0 && i%4 == 0 {
			s.WriteByte(':')
		}
		fmt.Fprintf(&s, "%02x", c)
	}
	return s.String()
}

func (p probe) in(text string) bool {
	if bytes.Contains([]byte(text), p.b) {
		return true
	}
	flat := strings.NewReplacer(":", "", " ", "", "\n", "", "0x", "").Replace(strings.ToLower(text))
	return strings.Contains(flat, hex.EncodeToString(p.b))
}

func roleLogKeys() int {
	res := os.NewFile(3, "results")
	fail := func(format string, args ...any) int {
		fmt.Fprintf(res, "FAIL "+format+"\n", args...)
		return 1
	}
	rec := newRecorder()
	ucs.SetLogger(slog.New(rec))

	uctx, err := ucp.NewContext(ucp.WithFeatures(ucp.FeatureRMA))
	if err != nil {
		return fail("NewContext: %v", err)
	}
	defer uctx.Close()
	server, err := uctx.NewWorker()
	if err != nil {
		return fail("NewWorker: %v", err)
	}
	defer server.Close()
	client, err := uctx.NewWorker()
	if err != nil {
		return fail("NewWorker: %v", err)
	}
	defer client.Close()
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go server.Run(runCtx) // the owner of the memory progresses (tcp emulates puts)

	secret := make([]byte, 64)
	rand.Read(secret)
	mem, err := uctx.Allocate(64 << 10)
	if err != nil {
		return fail("Allocate: %v", err)
	}
	defer mem.Close()
	b, err := mem.Bytes()
	if err != nil {
		return fail("Bytes: %v", err)
	}
	copy(b[4096:], secret)
	key, err := mem.PackRemoteKey()
	if err != nil {
		return fail("PackRemoteKey: %v", err)
	}
	addr, err := server.PackAddress()
	if err != nil {
		return fail("PackAddress: %v", err)
	}
	ep, err := client.ConnectWorker(addr)
	if err != nil {
		return fail("ConnectWorker: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	defer ep.Close(ctx, ucp.CloseFlush)
	rkey, err := ep.UnpackRemoteKey(ctx, key)
	if err != nil {
		return fail("UnpackRemoteKey: %v", err)
	}
	defer rkey.Close()
	region, err := rkey.Region(mem.Address(), mem.Len())
	if err != nil {
		return fail("Region: %v", err)
	}
	got := make([]byte, len(secret))
	if _, err := region.ReadAtContext(ctx, got, 4096); err != nil {
		return fail("get: %v", err)
	}
	if !bytes.Equal(got, secret) {
		return fail("get read %x, want %x", got, secret)
	}
	if _, err := region.WriteAtContext(ctx, secret, 8192); err != nil {
		return fail("put: %v", err)
	}
	if err := region.Flush(ctx); err != nil {
		return fail("flush: %v", err)
	}

	marker := newMarker()
	if err := provokeError(marker); err != nil {
		return fail("%v", err)
	}
	if _, ok := rec.find(marker, hang); !ok {
		return fail("the marker line was not routed")
	}
	ucs.ResetLogger()

	fmt.Fprintf(res, "KEY %x\nSECRET %x\n", key, secret)
	for _, r := range rec.records() {
		j, _ := json.Marshal(struct{ Level, Text string }{attrs(r)[ucs.LogKeyLevel].String(), recordText(r)})
		fmt.Fprintf(res, "LOG %s\n", j)
	}
	fmt.Fprintf(res, "DROPPED %d\nDONE\n", ucs.LogsDropped())
	return 0
}
