// Command importer is the DPU side of the demo, on package share: it
// dials an exporter, reads the region "data" -passes times and verifies
// its pattern, writes a pattern into "inbox" -passes times (the exporter
// checks it when the session ends), times 8-byte reads, and reports GB/s
// (of the first pass, which touches memory for the first time, and of the
// passes after it) and latency percentiles. Rotations of "data" during the reads are followed without
// error. With -hold it then keeps the session until the exporter revokes
// it, and checks that a read fails after the revocation.
//
//	importer -connect 127.0.0.1:13337 -key-file secret [-mode auto|export|rkey] [-json]
//
// Exit status: 0 done, 1 an error, 2 bad flags, 3 the session or a grant
// was refused, 4 data did not verify, 5 revoked before the run finished.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ucxgo/ucx/examples/internal/demo"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

var (
	connect    = flag.String("connect", "", "the exporter's control address, host:port")
	key        = flag.String("key", "", "the sealing secret, at least 16 bytes (prefer -key-file)")
	keyFile    = flag.String("key-file", "", "file holding the sealing secret (at least 16 bytes)")
	mode       = flag.String("mode", "auto", "auto (what the exporter offers), export or rkey (fail unless the exporter runs in it)")
	timeout    = flag.Duration("timeout", time.Minute, "bound on the whole run, -hold included: the session is closed then")
	passes     = flag.Int("passes", 1, "times to read \"data\" in full (each verified) and to write \"inbox\" in full")
	chunk      = flag.Int("chunk", share.DefaultChunk, "bytes per RMA operation")
	depth      = flag.Int("depth", share.DefaultDepth, "RMA operations in flight per call")
	latencyOps = flag.Int("latency-ops", 1000, "8-byte reads timed for the latency percentiles")
	hold       = flag.Bool("hold", false, "after the run, wait for the exporter to revoke the session")
	asJSON     = flag.Bool("json", false, "print the summary as one JSON line")
)

type summary struct {
	Mode         string  `json:"mode"`
	ExporterUCX  string  `json:"exporter_ucx"`
	ImporterUCX  string  `json:"importer_ucx"`
	Bytes        int     `json:"bytes_per_direction"`
	Passes       int     `json:"passes"`
	Moved        int64   `json:"bytes_moved"`
	ReadGBps     float64 `json:"read_gbps"`  // the passes after the first (the first alone for one pass)
	WriteGBps    float64 `json:"write_gbps"` // likewise
	FirstRead    float64 `json:"first_read_gbps"`
	FirstWrite   float64 `json:"first_write_gbps"` // the exporter's memory is touched for the first time
	LatencyP50   float64 `json:"latency_p50_us"`
	LatencyP99   float64 `json:"latency_p99_us"`
	LatencyP999  float64 `json:"latency_p999_us"`
	ReadOK       bool    `json:"read_verified"`
	Written      bool    `json:"inbox_written"`
	Rotations    int64   `json:"rotations"` // followed during the read passes
	Revoked      bool    `json:"revoked"`
	RevokeReason string  `json:"revoke_reason,omitempty"`
}

func main() {
	flag.Parse()
	m, err := demo.ParseMode(*mode)
	sealer, serr := demo.Sealer(*key, *keyFile)
	if err = errors.Join(err, serr); err == nil && (*connect == "" || *passes < 1 || *latencyOps < 0) {
		err = errors.New("-connect is required, -passes must be at least 1 and -latency-ops not negative")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "importer:", err)
		os.Exit(2)
	}
	sum, err := run(sealer, m)
	code := 0
	switch {
	case err == nil:
	case errors.Is(err, share.ErrRefused), errors.Is(err, share.ErrSeal), errors.Is(err, share.ErrGrant):
		code = 3
	case errors.Is(err, errMismatch):
		code = 4
	case errors.Is(err, share.ErrRevoked):
		code = 5
		if sum != nil {
			sum.Revoked, sum.RevokeReason = true, err.Error()
		}
	default:
		code = 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "importer:", err)
	}
	switch {
	case sum == nil:
	case *asJSON:
		json.NewEncoder(os.Stdout).Encode(sum)
	default:
		fmt.Printf("importer: mode %s, exporter on UCX %s, importer on UCX %s\n", sum.Mode, sum.ExporterUCX, sum.ImporterUCX)
		fmt.Printf("importer: read data %d time(s), %d bytes each, pattern verified: %t (%.2f GB/s, first pass %.2f); %d rotation(s) followed\n", sum.Passes, sum.Bytes, sum.ReadOK, sum.ReadGBps, sum.FirstRead, sum.Rotations)
		fmt.Printf("importer: wrote %d bytes into inbox %d time(s): %t (%.2f GB/s, first pass %.2f); the exporter checks them when the session ends\n", sum.Bytes, sum.Passes, sum.Written, sum.WriteGBps, sum.FirstWrite)
		fmt.Printf("importer: 8-byte read latency p50 %.1f us, p99 %.1f us, p99.9 %.1f us; %d bytes moved\n", sum.LatencyP50, sum.LatencyP99, sum.LatencyP999, sum.Moved)
		if sum.Revoked {
			fmt.Printf("importer: revoked: %s\n", sum.RevokeReason)
		}
		verdict := "PASS"
		if err != nil {
			verdict = "FAIL"
		}
		fmt.Println("importer:", verdict)
	}
	os.Exit(code)
}

var errMismatch = errors.New("data mismatch")

func gbps(n int, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

func run(sealer share.Sealer, m share.Mode) (sum *summary, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("the run did not finish within -timeout %s: %v", *timeout, err)
		}
	}()
	imp, err := share.Dial(ctx, "tcp", *connect, sealer, share.WithRequireMode(m), share.WithChunk(*chunk), share.WithDepth(*depth))
	if err != nil {
		return nil, err
	}
	defer imp.Close()
	// At -timeout the session is closed: that fails the calls in flight.
	defer context.AfterFunc(ctx, func() { imp.Close() })()
	data, err := imp.Region("data")
	if err != nil {
		return nil, err
	}
	inbox, err := imp.Region("inbox")
	if err != nil {
		return nil, err
	}
	sum = &summary{Mode: imp.Mode().String(), ExporterUCX: imp.ExporterUCX().String(), ImporterUCX: ucs.LoadedVersion().String(),
		Bytes: data.Len(), Passes: *passes}
	defer func() { st := imp.Stats(); sum.Moved = st.BytesRead + st.BytesWritten }()

	// Read "data" in full, each pass into a cleared buffer, and verify it.
	buf := make([]byte, max(data.Len(), inbox.Len()))
	var reads passTimes
	for i := range *passes {
		clear(buf)
		start := time.Now()
		if _, err := data.ReadAtContext(ctx, buf[:data.Len()], 0); err != nil {
			return sum, err
		}
		reads.add(time.Since(start))
		if err := demo.Verify(buf[:data.Len()], demo.DataSeed); err != nil {
			return sum, fmt.Errorf("%w: pass %d: data does not hold the exporter's pattern: %v", errMismatch, i+1, err)
		}
	}
	sum.ReadOK, sum.Rotations = true, imp.Stats().Rotations
	sum.FirstRead, sum.ReadGBps = reads.gbps(data.Len())

	// Write the inbox's pattern; WriteAt returns once it is in the exporter's memory.
	demo.Fill(buf[:inbox.Len()], demo.InboxSeed)
	var writes passTimes
	for range *passes {
		start := time.Now()
		if _, err := inbox.WriteAtContext(ctx, buf[:inbox.Len()], 0); err != nil {
			return sum, err
		}
		writes.add(time.Since(start))
	}
	sum.Written = true
	sum.FirstWrite, sum.WriteGBps = writes.gbps(inbox.Len())

	// Latency of 8-byte reads, each checked.
	lat := make([]float64, *latencyOps)
	for i := range lat {
		start := time.Now()
		if _, err := data.ReadAtContext(ctx, buf[:8], 0); err != nil {
			return sum, err
		}
		lat[i] = float64(time.Since(start).Nanoseconds()) / 1e3
		if err := demo.Verify(buf[:8], demo.DataSeed); err != nil {
			return sum, fmt.Errorf("%w: an 8-byte read: %v", errMismatch, err)
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		sum.LatencyP50, sum.LatencyP99, sum.LatencyP999 = pct(0.50), pct(0.99), pct(0.999)
	}
	if !*hold {
		return sum, nil
	}

	fmt.Fprintln(os.Stderr, "importer: run complete; holding the session until the exporter revokes it")
	<-imp.Revoked() // or closed at -timeout
	if _, err := data.ReadAt(buf[:8], 0); ctx.Err() != nil || !errors.Is(err, share.ErrRevoked) {
		return sum, fmt.Errorf("not revoked, or a read after the revocation did not fail as revoked: %v", err)
	}
	sum.Revoked, sum.RevokeReason = true, data.Err().Error()
	return sum, nil
}

// passTimes are the durations of the passes over a region: the first, in
// which memory is touched for the first time, and the rest.
type passTimes struct {
	first, rest time.Duration
	n           int
}

func (p *passTimes) add(d time.Duration) {
	if p.n == 0 {
		p.first = d
	} else {
		p.rest += d
	}
	p.n++
}

// gbps is the first pass's rate and that of the passes after it (the first
// again when there was one pass).
func (p *passTimes) gbps(size int) (first, steady float64) {
	first = gbps(size, p.first)
	if p.n < 2 {
		return first, first
	}
	return first, gbps((p.n-1)*size, p.rest)
}
