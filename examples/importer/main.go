// Command importer is the DPU side of the exported-key demo: it connects
// to an exporter, checks the envelope (magic, version, HMAC, lease), imports
// the descriptor (export mode) or unpacks the rkey (rkey mode), reads the
// host memory and verifies its pattern, writes a new pattern and has the
// exporter verify it, then reports bytes moved, GB/s and latency.
//
//	importer -connect 127.0.0.1:13337 -key-file secret [-mode auto|export|rkey] [-json]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/ucxgo/ucx/examples/envelope"
	"github.com/ucxgo/ucx/examples/internal/demo"
	"github.com/ucxgo/ucx/ucp"
)

type config struct {
	connect    string
	secret     []byte
	mode       string
	timeout    time.Duration
	chunk      int
	latencyOps int
	json       bool
}

// Exit codes, so scripts can tell failures apart.
const (
	exitOK       = 0
	exitFail     = 1
	exitEnvelope = 3 // the envelope was refused
	exitMismatch = 4 // data did not verify
	exitRevoked  = 5 // the exporter revoked the key before the run finished
)

// errRevoked stops the transfers when the exporter revokes the key.
var errRevoked = errors.New("the exporter revoked the key")

func main() {
	var c config
	var key, keyFile string
	flag.StringVar(&c.connect, "connect", "", "exporter address host:port")
	flag.StringVar(&key, "key", "", "HMAC key for the envelope")
	flag.StringVar(&keyFile, "key-file", "", "file holding the HMAC key")
	flag.StringVar(&c.mode, "mode", "auto", "auto (what the exporter offers), export (fail unless exported) or rkey")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on each step")
	flag.IntVar(&c.chunk, "chunk", 1<<20, "bytes per RMA operation")
	flag.IntVar(&c.latencyOps, "latency-ops", 1000, "8-byte reads timed for the latency percentiles")
	flag.BoolVar(&c.json, "json", false, "print the summary as JSON")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s -connect HOST:PORT -key-file FILE [flags]\n\nImports host memory from an exporter and verifies a round trip.\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	switch {
	case c.connect == "":
		fmt.Fprintln(os.Stderr, "importer: -connect is required")
		os.Exit(2)
	case key != "" && keyFile != "":
		fmt.Fprintln(os.Stderr, "importer: give -key or -key-file, not both")
		os.Exit(2)
	case keyFile != "":
		b, err := os.ReadFile(keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "importer:", err)
			os.Exit(2)
		}
		c.secret = b
	default:
		c.secret = []byte(key)
	}
	if len(c.secret) == 0 {
		fmt.Fprintln(os.Stderr, "importer: an HMAC key is required (-key or -key-file)")
		os.Exit(2)
	}
	sum, code, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "importer:", err)
	}
	if sum != nil {
		if c.json {
			json.NewEncoder(os.Stdout).Encode(sum)
		} else {
			sum.print()
		}
	}
	os.Exit(code)
}

type summary struct {
	Mode        string  `json:"mode"`
	Why         string  `json:"why"`
	Bytes       uint64  `json:"bytes_per_direction"`
	Moved       uint64  `json:"bytes_moved"`
	ReadGBps    float64 `json:"read_gbps"`
	WriteGBps   float64 `json:"write_gbps"`
	LatencyP50  float64 `json:"latency_p50_us"`
	LatencyP99  float64 `json:"latency_p99_us"`
	LatencyP999 float64 `json:"latency_p999_us"`
	ReadOK      bool    `json:"read_verified"`
	WriteOK     bool    `json:"write_verified_by_exporter"`
	Exporter    string  `json:"exporter_says"`
	Revoked     bool    `json:"revoked"`
}

func (s *summary) print() {
	fmt.Printf("importer: mode %s (%s)\n", s.Mode, s.Why)
	fmt.Printf("importer: read %d bytes, pattern verified: %t (%.2f GB/s)\n", s.Bytes, s.ReadOK, s.ReadGBps)
	fmt.Printf("importer: wrote %d bytes, exporter verified: %t (%.2f GB/s): %s\n", s.Bytes, s.WriteOK, s.WriteGBps, s.Exporter)
	fmt.Printf("importer: 8-byte read latency p50 %.1f us, p99 %.1f us, p99.9 %.1f us; %d bytes moved\n", s.LatencyP50, s.LatencyP99, s.LatencyP999, s.Moved)
	if s.ReadOK && s.WriteOK {
		fmt.Println("importer: PASS")
	} else {
		fmt.Println("importer: FAIL")
	}
}

// link is what the RMA runs on: the host's memory as a region (over the
// exporter endpoint in rkey mode, over a local region of the imported
// mapping in export mode) and the DPU-side buffer.
type link struct {
	host    ucp.RemoteRegion
	local   *ucp.Mem // DPU-side buffer
	revoked <-chan struct{}
}

// localBytes is the DPU-side copy of the region, which the importer checks.
func (l *link) localBytes() ([]byte, error) { return l.local.Bytes() }

// op moves n bytes at off: read (host to DPU) or write (DPU to host).
func (l *link) op(n, off int, read bool, timeout time.Duration) error {
	select {
	case <-l.revoked:
		return errRevoked
	default:
	}
	var req ucp.Request
	var err error
	if read {
		req, err = l.host.GetMem(l.local, off, n, off)
	} else {
		req, err = l.host.PutMem(l.local, off, n, off)
	}
	if err != nil {
		return err
	}
	return waitReq(&req, timeout)
}

// transfer moves the whole region in chunks, printing progress on long ones.
func (l *link) transfer(c config, n int, read, progress bool) error {
	what := "write"
	if read {
		what = "read"
	}
	last := time.Now()
	for off := 0; off < n; off += c.chunk {
		if err := l.op(min(c.chunk, n-off), off, read, c.timeout); err != nil {
			return fmt.Errorf("%s at offset %d: %w", what, off, err)
		}
		if progress && time.Since(last) > time.Second {
			fmt.Printf("importer: %s %d/%d MiB\n", what, (off+c.chunk)>>20, n>>20)
			last = time.Now()
		}
	}
	return nil
}

func waitReq(req *ucp.Request, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return req.Wait(ctx)
}

func gbps(n int, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

func pct(sorted []float64, p float64) float64 {
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "importer:", err)
		os.Exit(exitFail)
	}
}

func run(c config) (*summary, int, error) {
	features := ucp.FeatureRMA | ucp.FeatureAM
	if c.mode == "export" {
		features |= ucp.FeatureExportedMemh
	}
	ctx, err := ucp.NewContext(ucp.WithFeatures(features))
	if err != nil {
		return nil, exitFail, err
	}
	defer ctx.Close()
	w, err := ctx.NewWorker()
	if err != nil {
		return nil, exitFail, err
	}
	defer w.Close()

	// The envelope and the verify result are waited for: queues, since a
	// handler must not block.
	envs, err := w.OpenAMQueue(demo.AMEnvelope)
	if err != nil {
		return nil, exitFail, err
	}
	defer envs.Close()
	results, err := w.OpenAMQueue(demo.AMResult)
	if err != nil {
		return nil, exitFail, err
	}
	defer results.Close()
	revoked := make(chan struct{})
	var revokeOnce sync.Once
	must(w.SetAMHandler(demo.AMRevoke, func(*ucp.AMMessage) { revokeOnce.Do(func() { close(revoked) }) }))

	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); w.Run(runCtx) }()
	defer func() { stopRun(); <-runDone }()

	ep, err := w.Connect(c.connect)
	if err != nil {
		return nil, exitFail, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		ep.Close(cctx, ucp.CloseFlush)
		cancel()
	}()

	// The wait for the envelope ends early if the exporter fails.
	wait, cancel := context.WithTimeout(context.Background(), c.timeout)
	go func() {
		select {
		case <-ep.Failed():
			cancel()
		case <-wait.Done():
		}
	}()
	m, err := envs.Receive(wait)
	cancel()
	if err != nil {
		if ep.Err() != nil {
			return nil, exitFail, fmt.Errorf("exporter connection failed: %w", ep.Err())
		}
		return nil, exitFail, fmt.Errorf("no envelope from %s within %s: %w", c.connect, c.timeout, err)
	}
	env, err := envelope.Open(m.Data, c.secret, time.Now())
	if err != nil {
		return nil, exitEnvelope, fmt.Errorf("refusing the envelope: %w", err)
	}
	sum := &summary{Mode: env.Mode.String(), Bytes: env.Length}
	switch {
	case c.mode == "export" && env.Mode != envelope.ModeExport:
		return nil, exitFail, errors.New("export mode requested, but the exporter sent an rkey: it has no memory domain that can export")
	case c.mode == "rkey" && env.Mode != envelope.ModeRkey:
		return nil, exitFail, errors.New("rkey mode requested, but the exporter sent an exported descriptor")
	case c.mode == "auto":
		sum.Why = "auto: the exporter offered " + env.Mode.String()
		if env.Mode == envelope.ModeRkey {
			sum.Why += ", so it has no memory domain that can export"
		}
	default:
		sum.Why = c.mode + " requested"
	}

	stepCtx, cancel := context.WithTimeout(context.Background(), c.timeout)
	l, cleanup, err := setup(stepCtx, ctx, w, ep, env)
	cancel()
	if err != nil {
		return sum, exitFail, err
	}
	l.revoked = revoked
	// However the run ends, drop the key and tell the exporter (the same
	// message acknowledges a revoke).
	defer func() {
		cleanup()
		if req, err := ep.SendAM(demo.AMAck, nil, nil, ucp.AMReply); err == nil {
			waitReq(&req, c.timeout)
		}
	}()
	sum, code, err := l.exercise(c, ep, sum, results)
	if errors.Is(err, errRevoked) {
		sum.Revoked = true
		return sum, exitRevoked, err
	}
	return sum, code, err
}

// exercise reads and verifies the host memory, writes a new pattern for the
// exporter to verify, and times 8-byte reads.
func (l *link) exercise(c config, ep *ucp.Endpoint, sum *summary, results *ucp.AMQueue) (*summary, int, error) {
	n := int(sum.Bytes)
	lb, err := l.localBytes()
	if err != nil {
		return sum, exitFail, err
	}
	// Read the host memory and verify it.
	start := time.Now()
	if err := l.transfer(c, n, true, !c.json); err != nil {
		return sum, exitFail, err
	}
	sum.ReadGBps = gbps(n, time.Since(start))
	sum.Moved += uint64(n)
	if err := demo.Verify(lb[:n], 1); err != nil {
		return sum, exitMismatch, fmt.Errorf("host memory does not hold the exporter's pattern: %w", err)
	}
	sum.ReadOK = true

	// Write a new pattern and have the exporter verify it.
	if !c.json {
		fmt.Printf("importer: read verified; writing %d bytes\n", n)
	}
	demo.Fill(lb[:n], 2)
	start = time.Now()
	if err := l.transfer(c, n, false, !c.json); err != nil {
		return sum, exitFail, err
	}
	fctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	err = l.host.Flush(fctx)
	cancel()
	if err != nil {
		return sum, exitFail, err
	}
	sum.WriteGBps = gbps(n, time.Since(start))
	sum.Moved += uint64(n)
	req, err := ep.SendAM(demo.AMVerify, demo.VerifyHeader(2, uint64(n)), nil, ucp.AMReply)
	if err != nil {
		return sum, exitFail, err
	}
	if err := waitReq(&req, c.timeout); err != nil {
		return sum, exitFail, err
	}
	rctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	r, err := results.Receive(rctx)
	cancel()
	if err != nil {
		return sum, exitFail, fmt.Errorf("the exporter did not answer the verify request: %w", err)
	}
	sum.WriteOK, sum.Exporter = len(r.Header) == 1 && r.Header[0] == 1, string(r.Data)
	if !sum.WriteOK {
		return sum, exitMismatch, fmt.Errorf("exporter: %s", sum.Exporter)
	}

	// Latency of 8-byte reads.
	lat := make([]float64, 0, c.latencyOps)
	for range c.latencyOps {
		t0 := time.Now()
		if err := l.op(8, 0, true, c.timeout); err != nil {
			return sum, exitFail, err
		}
		lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	sum.Moved += uint64(8 * c.latencyOps)
	sort.Float64s(lat)
	if len(lat) > 0 {
		sum.LatencyP50, sum.LatencyP99, sum.LatencyP999 = pct(lat, 0.50), pct(lat, 0.99), pct(lat, 0.999)
	}

	return sum, exitOK, nil
}

// setup turns the envelope's key into a link: rkey mode unpacks the rkey
// on the exporter endpoint; export mode imports the descriptor and reaches
// the imported host memory through a local region of this worker.
func setup(wait context.Context, ctx *ucp.Context, w *ucp.Worker, ep *ucp.Endpoint, env *envelope.Envelope) (*link, func(), error) {
	local, err := ctx.Allocate(int(env.Length))
	if err != nil {
		return nil, nil, err
	}
	if env.Mode == envelope.ModeRkey {
		rkey, err := ep.UnpackRemoteKey(wait, env.Key)
		if err != nil {
			local.Close()
			return nil, nil, err
		}
		host, err := rkey.Region(env.Address, int(env.Length))
		if err != nil {
			rkey.Close()
			local.Close()
			return nil, nil, err
		}
		return &link{host: host, local: local}, func() { rkey.Close(); local.Close() }, nil
	}
	desc, err := ucp.ParseDescriptor(env.Key)
	if err != nil {
		local.Close()
		return nil, nil, err
	}
	host, err := ctx.Import(desc)
	if err != nil {
		local.Close()
		return nil, nil, err
	}
	// The imported mapping is the exporter's memory, reached over a
	// loopback endpoint to this worker.
	lr, err := w.LocalRegion(wait, host)
	if err != nil {
		host.Close()
		local.Close()
		return nil, nil, err
	}
	return &link{host: lr.RemoteRegion, local: local}, func() {
		lr.Close(context.Background())
		host.Close()
		local.Close()
	}, nil
}
