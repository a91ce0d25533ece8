package share_test

// The child processes of the multi-process tests (faults_test.go,
// netcut_test.go, offload_test.go): this test binary started as a role
// (testproc.Role), so that each uses the package itself. A child prints
// result lines on stdout and takes commands on stdin, one a line; closing
// its stdin ends it cleanly.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

const (
	roleExporter = "share-exporter"
	roleImporter = "share-importer"
	rolePeer     = "share-peer"
)

func init() {
	testproc.Role(roleExporter, runExporter)
	testproc.Role(roleImporter, runImporter)
	testproc.Role(rolePeer, runPeer)
}

// out prints one result line at a time.
var outMu sync.Mutex

func out(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// classes names the causes err wraps, for the parent to check:
// "revoked=true seal=false ... ucx=false" (ucx: a UCX status).
func classes(err error) string {
	var st ucs.Status
	return fmt.Sprintf("revoked=%t seal=%t grant=%t refused=%t protocol=%t closed=%t ucx=%t",
		errors.Is(err, share.ErrRevoked), errors.Is(err, share.ErrSeal), errors.Is(err, share.ErrGrant),
		errors.Is(err, share.ErrRefused), errors.Is(err, share.ErrProtocol), errors.Is(err, ucs.ErrClosed),
		errors.As(err, &st))
}

// fields parses the k=v words of a result line; the text after " msg=" is
// the value of msg, spaces and all.
func fields(line string) map[string]string {
	m := map[string]string{}
	line, msg, ok := strings.Cut(line, " msg=")
	if ok {
		m["msg"] = msg
	}
	for _, w := range strings.Fields(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			m[k] = v
		}
	}
	return m
}

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "%q is not a number", s)
	return n
}

// closedChan says whether c is closed.
func closedChan(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// checkPattern says where b first differs from pattern(len(b), seed), or
// -1.
func checkPattern(b []byte, seed byte) int {
	want := pattern(len(b), seed)
	if bytes.Equal(b, want) {
		return -1
	}
	for i := range b {
		if b[i] != want[i] {
			return i
		}
	}
	return -1
}

// ---- exporter ----

// regionSpec is "id:size:seed:prot" (prot r, w or rw).
type regionSpec struct {
	id   string
	size int
	seed byte
	prot share.Access
}

func parseRegions(s string) ([]regionSpec, error) {
	var rs []regionSpec
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(part, ":")
		if len(f) != 4 {
			return nil, fmt.Errorf("region %q is not id:size:seed:prot", part)
		}
		size, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, err
		}
		seed, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, err
		}
		var prot share.Access
		if strings.Contains(f[3], "r") {
			prot |= share.ReadOnly
		}
		if strings.Contains(f[3], "w") {
			prot |= share.WriteOnly
		}
		rs = append(rs, regionSpec{f[0], size, byte(seed), prot})
	}
	return rs, nil
}

func parseMode(s string) share.Mode {
	if s == "rkey" {
		return share.ModeRkey
	}
	return share.ModeAuto
}

// runExporter shares the regions of -regions (each filled with its
// pattern) and prints "ADDR host:port" and "MODE m". Commands:
//
//	check ID SEED OFF N  CHECK ok | CHECK bad at=I: bytes [OFF,OFF+N) of ID are pattern(N, SEED)
//	fill ID SEED         FILLED: ID is pattern(len, SEED)
//	stats                STATS {json of Exporter.Stats}
//	watch                WATCHING n=N live=L1,L2...: the sessions open now and
//	                     their live registrations; as each ends, "ENDED id=I
//	                     live=L failed=true|false msg=Session.Err"
//
// At the end of stdin it closes the exporter, then the regions' Memory:
// "CLOSED err=..." (nil).
func runExporter() int {
	fs := flag.NewFlagSet(roleExporter, flag.ContinueOnError)
	listen := fs.String("listen", hostAddr, "control address")
	mode := fs.String("mode", "auto", "auto or rkey")
	tls := fs.String("tls", "", "UCX_TLS of the exporter's context")
	regions := fs.String("regions", "a:65536:1:rw", "id:size:seed:prot,...")
	if err := fs.Parse(os.Args[2:]); err != nil {
		return 2
	}
	fail := func(err error) int { out("ERROR msg=%v", err); return 1 }
	specs, err := parseRegions(*regions)
	if err != nil {
		return fail(err)
	}
	s, err := share.NewHMACSealer(secret)
	if err != nil {
		return fail(err)
	}
	opts := []share.ExporterOption{share.WithMode(parseMode(*mode))}
	if *tls != "" {
		opts = append(opts, share.WithUCXConfig("TLS", *tls))
	}
	e, err := share.NewExporter(s, opts...)
	if err != nil {
		return fail(err)
	}
	mem := map[string][]byte{} // the regions' bytes (Memory.Bytes)
	var mems []*share.Memory
	closeMems := func() error {
		var errs []error
		for _, m := range mems {
			errs = append(errs, m.Close())
		}
		return errors.Join(errs...)
	}
	defer closeMems() // on failure (refused while e shares them: the process ends)
	for _, r := range specs {
		m, err := share.NewMemory(r.size)
		if err != nil {
			return fail(err)
		}
		mems = append(mems, m)
		mem[r.id] = m.Bytes()
		copy(mem[r.id], pattern(r.size, r.seed))
		if err := e.Add(context.Background(), r.id, m, r.prot); err != nil {
			return fail(err)
		}
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	m, _ := e.Mode()
	out("MODE %s", m)
	out("ADDR %s", l.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 5 && f[0] == "check":
			b := mem[f[1]]
			seed, _ := strconv.Atoi(f[2])
			off, _ := strconv.Atoi(f[3])
			n, _ := strconv.Atoi(f[4])
			if i := checkPattern(b[off:off+n], byte(seed)); i >= 0 {
				out("CHECK bad at=%d", off+i)
			} else {
				out("CHECK ok")
			}
		case len(f) == 3 && f[0] == "fill":
			seed, _ := strconv.Atoi(f[2])
			copy(mem[f[1]], pattern(len(mem[f[1]]), byte(seed)))
			out("FILLED")
		case len(f) == 1 && f[0] == "stats":
			j, _ := json.Marshal(e.Stats())
			out("STATS %s", j)
		case len(f) == 1 && f[0] == "watch":
			ss := e.Sessions()
			var live []string
			for _, s := range ss {
				live = append(live, strconv.FormatInt(s.Stats().Live, 10))
			}
			out("WATCHING n=%d live=%s", len(ss), strings.Join(live, ","))
			for _, s := range ss {
				go func() {
					select {
					case <-s.Done():
					case <-time.After(time.Minute):
						out("NOT-ENDED id=%s", s.Stats().ID)
						return
					}
					st := s.Stats()
					out("ENDED id=%s live=%d failed=%t msg=%v", st.ID, st.Live, s.Err() != nil, s.Err())
				}()
			}
		default:
			out("ERROR msg=unknown command %q", in.Text())
		}
	}
	err = errors.Join(e.Close(), closeMems()) // the memory closes once the exporter did
	out("CLOSED err=%v", err)
	if err := <-served; err != nil {
		out("ERROR msg=serve: %v", err)
		return 1
	}
	return 0
}

// ---- importer ----

// stream runs one region's reads (or writes) of the whole region in a
// loop, verifying what it reads, until stop; it goes on after failures
// (1 ms apart), so that it also counts what succeeds after a revocation.
type stream struct {
	op    string // "read" or "write"
	imp   *share.Importer
	r     *share.Region
	want  []byte
	opTO  time.Duration // each call's ctx, 0: none
	start time.Time

	ok     atomic.Int64 // calls that succeeded
	after  atomic.Int64 // of which started after a revocation was seen
	wrong  atomic.Int64 // reads that succeeded with other bytes
	fails  atomic.Int64
	first  chan struct{}
	failed chan struct{} // closed once err is set
	err    error         // the first failure
	fonce  sync.Once
}

func newStream(op string, imp *share.Importer, r *share.Region, seed byte, opTO time.Duration) *stream {
	return &stream{op: op, imp: imp, r: r, want: pattern(r.Len(), seed), opTO: opTO, start: time.Now(),
		first: make(chan struct{}), failed: make(chan struct{})}
}

// run loops until stop; report prints the first failure and the first
// wrong read as lines (nil: not printed).
func (s *stream) run(stop <-chan struct{}, report func(format string, args ...any)) {
	buf := make([]byte, len(s.want))
	for !closedChan(stop) {
		revoked := closedChan(s.r.Revoked()) || closedChan(s.imp.Revoked())
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if s.opTO > 0 {
			ctx, cancel = context.WithTimeout(ctx, s.opTO)
		}
		var err error
		if s.op == "write" {
			_, err = s.r.WriteAtContext(ctx, s.want, 0)
		} else {
			_, err = s.r.ReadAtContext(ctx, buf, 0)
		}
		cancel()
		if err != nil {
			s.fails.Add(1)
			s.fonce.Do(func() {
				s.err = err
				if report != nil {
					report("FAIL %s %s at=%s msg=%v", s.op, classes(err), time.Since(s.start).Round(time.Millisecond), err)
				}
				close(s.failed)
			})
			time.Sleep(time.Millisecond)
			continue
		}
		if s.op == "read" {
			if i := checkPattern(buf, s.want[0]); i >= 0 {
				if s.wrong.Add(1) == 1 && report != nil {
					report("WRONG %s at=%d revoked=%t", s.op, i, revoked)
				}
			}
		}
		if revoked {
			s.after.Add(1)
		}
		if s.ok.Add(1) == 2 { // a call went through, and the next started
			close(s.first)
		}
	}
}

func (s *stream) result() string {
	return fmt.Sprintf("RESULT %s ok=%d after=%d wrong=%d fails=%d revoked=%t",
		s.op, s.ok.Load(), s.after.Load(), s.wrong.Load(), s.fails.Load(), closedChan(s.r.Revoked()))
}

// runImporter dials -connect (with -wait, once "dial" comes on stdin;
// with -retry, again while nothing listens there or the handshake times
// out), prints "READY mode" (or "DIALERR classes msg=..." and exits 3),
// streams -read and -write (id:seed) and prints "STREAMING" once each
// stream's calls went through (each bounded by -op-timeout, if given). A
// stream's first failure prints "FAIL op classes at=... msg=..."; a read
// that saw other bytes "WRONG". Commands:
//
//	count  COUNT read=N write=N fails=N (calls that succeeded, failed)
//	stop   (and the end of stdin) stops the streams and prints a RESULT line
//	       per stream, "ISTATS {json}", "ERR classes msg=..." if the
//	       session is over, then closes: "CLOSED took=... err=...", "END",
//	       exit 0.
func runImporter() int {
	fs := flag.NewFlagSet(roleImporter, flag.ContinueOnError)
	connect := fs.String("connect", "", "the exporter's control address")
	key := fs.String("secret", string(secret), "sealing secret")
	mode := fs.String("mode", "auto", "auto or rkey")
	tls := fs.String("tls", "", "UCX_TLS of the importer's context")
	read := fs.String("read", "", "id:seed of the region to stream reads of")
	write := fs.String("write", "", "id:seed of the region to stream writes to")
	chunk := fs.Int("chunk", share.DefaultChunk, "WithChunk")
	opTO := fs.Duration("op-timeout", 0, "each call's ctx")
	dialTO := fs.Duration("dial-timeout", 10*time.Second, "WithHandshakeTimeout")
	retry := fs.Duration("retry", 0, "dial again while nothing listens or the handshake times out, for this long")
	wait := fs.Bool("wait", false, "dial once a line \"dial\" comes on stdin")
	if err := fs.Parse(os.Args[2:]); err != nil {
		return 2
	}
	in := bufio.NewScanner(os.Stdin)
	if *wait && (!in.Scan() || in.Text() != "dial") {
		out("ERROR msg=no dial line")
		return 1
	}
	fail := func(err error) int { out("ERROR msg=%v", err); return 1 }
	s, err := share.NewHMACSealer([]byte(*key))
	if err != nil {
		return fail(err)
	}
	opts := []share.ImporterOption{share.WithRequireMode(parseMode(*mode)), share.WithChunk(*chunk), share.WithHandshakeTimeout(*dialTO)}
	if *tls != "" {
		opts = append(opts, share.WithUCXConfig("TLS", *tls))
	}
	var imp *share.Importer
	for deadline := time.Now().Add(*retry); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), *dialTO+5*time.Second)
		imp, err = share.Dial(ctx, "tcp", *connect, s, opts...)
		cancel()
		again := errors.Is(err, ucs.ErrUnreachable) || errors.Is(err, ucs.ErrTimedOut)
		if err == nil || !again || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		out("DIALERR %s msg=%v", classes(err), err)
		return 3
	}
	out("READY %s", imp.Mode())
	var streams []*stream
	for _, spec := range []struct{ op, arg string }{{"read", *read}, {"write", *write}} {
		if spec.arg == "" {
			continue
		}
		id, seedText, _ := strings.Cut(spec.arg, ":")
		seed, _ := strconv.Atoi(seedText)
		r, err := imp.Region(id)
		if err != nil {
			return fail(err)
		}
		streams = append(streams, newStream(spec.op, imp, r, byte(seed), *opTO))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); st.run(stop, out) }()
	}
	go func() {
		for _, st := range streams {
			select {
			case <-st.first:
			case <-st.failed:
				return
			}
		}
		out("STREAMING")
	}()
	closeImp := func() {
		t0 := time.Now()
		err := imp.Close()
		out("CLOSED took=%s err=%v", time.Since(t0).Round(time.Millisecond), err)
	}
	for in.Scan() && in.Text() != "stop" {
		switch in.Text() {
		case "count":
			var r, w, f int64
			for _, st := range streams {
				if st.op == "read" {
					r = st.ok.Load()
				} else {
					w = st.ok.Load()
				}
				f += st.fails.Load()
			}
			out("COUNT read=%d write=%d fails=%d", r, w, f)
		default:
			out("ERROR msg=unknown command %q", in.Text())
		}
	}
	close(stop)
	wg.Wait()
	for _, st := range streams {
		out("%s", st.result())
	}
	j, _ := json.Marshal(imp.Stats())
	out("ISTATS %s", j)
	if err := imp.Err(); err != nil {
		out("ERR %s msg=%v", classes(err), err)
	}
	closeImp()
	out("END")
	return 0
}

// ---- peer ----

// The offload test's active messages.
const (
	amPeerRegion ucp.AMID = 0x7101 // peer -> DPU: the peer's packed region
	amToPeer     ucp.AMID = 0x7102 // DPU -> peer: a region's bytes (SendAM); header: the seed
	amToDPU      ucp.AMID = 0x7103 // peer -> DPU: bytes for ReceiveAM; header: the seed
)

// runPeer is the third process of offload: a UCX listener ("ADDR
// host:port"); the first client (the DPU) gets its memory of -size bytes
// (pattern -seed) as a packed region by active message (amPeerRegion),
// then "SENT-REGION". Every amToPeer message it receives is checked against
// pattern(len, header[0]): "AM ok rndv=.. len=.." or "AM bad ...".
// Commands:
//
//	check SEED OFF N  CHECK ok | CHECK bad at=I
//	fill SEED         FILLED
//	sendam SEED N     SENTAM err=...: pattern(N, SEED) to the DPU (amToDPU), rendezvous
//
// The end of stdin closes everything: "DONE", exit 0.
func runPeer() int {
	fs := flag.NewFlagSet(rolePeer, flag.ContinueOnError)
	size := fs.Int("size", 1<<20, "memory size")
	seed := fs.Int("seed", 1, "its first pattern")
	if err := fs.Parse(os.Args[2:]); err != nil {
		return 2
	}
	fail := func(err error) int { out("ERROR msg=%v", err); return 1 }
	uctx, err := ucp.NewContext(ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureAM))
	if err != nil {
		return fail(err)
	}
	defer uctx.Close()
	w, err := uctx.NewWorker()
	if err != nil {
		return fail(err)
	}
	defer w.Close()
	q, err := w.OpenAMQueue(amToPeer)
	if err != nil {
		return fail(err)
	}
	mem, err := uctx.Allocate(*size)
	if err != nil {
		return fail(err)
	}
	defer mem.Close()
	b, err := mem.Bytes()
	if err != nil {
		return fail(err)
	}
	copy(b, pattern(len(b), byte(*seed)))
	run, stopRun := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); w.Run(run) }()
	defer func() { stopRun(); <-runDone }()
	l, err := w.Listen(hostAddr)
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	out("ADDR %s", l.Addr())
	actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ep, err := l.Accept(actx)
	cancel()
	if err != nil {
		return fail(err)
	}
	closeEP := func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ep.Close(c, ucp.CloseFlush)
		cancel()
	}
	packed, err := mem.PackRegion()
	if err != nil {
		closeEP()
		return fail(err)
	}
	if err := waitReq(ep.SendAM(amPeerRegion, nil, packed, 0)); err != nil {
		closeEP()
		return fail(err)
	}
	out("SENT-REGION")
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := q.Receive(context.Background())
			if err != nil {
				return // the queue was closed
			}
			buf := make([]byte, m.Len())
			if err := waitReq(m.ReceiveInto(buf)); err != nil {
				out("AM bad msg=%v", err)
				continue
			}
			if len(m.Header) != 1 {
				out("AM bad msg=header of %d bytes", len(m.Header))
			} else if i := checkPattern(buf, m.Header[0]); i >= 0 {
				out("AM bad at=%d len=%d", i, len(buf))
			} else {
				out("AM ok rndv=%t len=%d", m.IsRendezvous(), len(buf))
			}
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 4 && f[0] == "check":
			s, _ := strconv.Atoi(f[1])
			off, _ := strconv.Atoi(f[2])
			n, _ := strconv.Atoi(f[3])
			if i := checkPattern(b[off:off+n], byte(s)); i >= 0 {
				out("CHECK bad at=%d", off+i)
			} else {
				out("CHECK ok")
			}
		case len(f) == 2 && f[0] == "fill":
			s, _ := strconv.Atoi(f[1])
			copy(b, pattern(len(b), byte(s)))
			out("FILLED")
		case len(f) == 3 && f[0] == "sendam":
			s, _ := strconv.Atoi(f[1])
			n, _ := strconv.Atoi(f[2])
			err := waitReq(ep.SendAM(amToDPU, []byte{byte(s)}, pattern(n, byte(s)), ucp.AMRndv))
			out("SENTAM err=%v", err)
		default:
			out("ERROR msg=unknown command %q", in.Text())
		}
	}
	q.Close()
	<-recvDone
	closeEP()
	out("DONE")
	return 0
}

// waitReq waits for a request, bounded.
func waitReq(req ucp.Request, err error) error {
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return req.Wait(ctx)
}

// ---- the parent's side ----

// startExporter starts the exporter role (through prefix, a network
// namespace's ip netns exec, or none) and returns it with its control
// address.
func startExporter(t *testing.T, prefix []string, args ...string) (*testproc.Proc, string) {
	t.Helper()
	p := testproc.Start(t, testproc.Spec{Role: roleExporter, Args: args, Prefix: prefix})
	return p, p.WaitLine(t, "ADDR", 60*time.Second)
}

func startImporter(t *testing.T, prefix []string, args ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Spec{Role: roleImporter, Args: args, Prefix: prefix})
}

// ask sends a command line and returns the rest of the answer line that
// starts with prefix.
func ask(t *testing.T, p *testproc.Proc, cmd, prefix string) string {
	t.Helper()
	_, err := fmt.Fprintln(p.Stdin(), cmd)
	require.NoError(t, err)
	return p.WaitLine(t, prefix, 30*time.Second)
}

// exporterStats asks the exporter role for its Stats.
func exporterStats(t *testing.T, p *testproc.Proc) share.ExporterStats {
	t.Helper()
	var st share.ExporterStats
	require.NoError(t, json.Unmarshal([]byte(ask(t, p, "stats", "STATS")), &st))
	return st
}

// results stops an importer role and returns its RESULT lines by op and
// the rest of its report ("ERR", "ISTATS" and "CLOSED" lines, the last
// unless it was closed before).
func results(t *testing.T, p *testproc.Proc) (map[string]map[string]string, map[string]string) {
	t.Helper()
	_, err := fmt.Fprintln(p.Stdin(), "stop")
	require.NoError(t, err)
	res := map[string]map[string]string{}
	rest := map[string]string{}
	for {
		l, ok := p.NextLine(t, 60*time.Second)
		require.True(t, ok, "the importer ended before it closed:\n%s", p.Output())
		word, tail, _ := strings.Cut(l, " ")
		switch word {
		case "RESULT":
			op, _, _ := strings.Cut(tail, " ")
			res[op] = fields(tail)
		case "ISTATS", "ERR", "CLOSED":
			rest[word] = tail
		case "END":
			return res, rest
		}
	}
}
