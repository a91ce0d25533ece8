package bench

// Two-process benchmarks: the benchmark process is the client; its peer is
// this test binary run again as the role "peer" (testproc), as the C twin
// runs itself. Worker addresses and the remote key go through the peer's
// stdin and stdout; the peer exits when its stdin closes.

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
)

const (
	peerTLSEnv = "UCXGO_BENCH_PEER_TLS" // the peer's UCX_TLS value
	peerCPUEnv = "BENCH_PEER_CPU"       // set by run.sh: the core the peer runs on
	amID       = 1                      // the echo handler's id, both sides
	warmup     = 16                     // untimed operations: wire-up completes before the loop
)

// The transports of the two-process rows: shared memory between the two
// processes, and tcp over loopback.
const (
	tlsShm = "posix,sysv,self"
	tlsTCP = "tcp"
)

func init() {
	testproc.Role("peer", func() int {
		if err := runPeer(os.Getenv(peerTLSEnv), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench peer:", err)
			return 1
		}
		return 0
	})
}

func TestMain(m *testing.M) {
	testproc.Main()
	os.Exit(m.Run())
}

// runPeer is the other process: it echoes every active message of id amID
// back on its own endpoint to the client, and owns the memory the client
// puts to and gets from, progressing its worker as Worker.Run does so that
// AM-emulated RMA completes.
func runPeer(tls string, in io.Reader, out io.Writer) error {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", tls))
	if err != nil {
		return err
	}
	defer ctx.Close()
	w, err := ctx.NewWorker()
	if err != nil {
		return err
	}
	defer w.Close()
	target, err := ctx.Allocate(4096)
	if err != nil {
		return err
	}
	defer target.Close()
	echo, err := ctx.Allocate(4096)
	if err != nil {
		return err
	}
	defer echo.Close()
	echoBuf, err := echo.Bytes()
	if err != nil {
		return err
	}
	rkey, err := target.PackRemoteKey()
	if err != nil {
		return err
	}

	var ep *ucp.Endpoint
	var pending []ucp.Request // replies UCX did not complete at once
	var sendErr error
	err = w.SetAMHandler(amID, func(m *ucp.AMMessage) {
		n := copy(echoBuf, m.Data)
		req, err := ep.SendAMMem(amID, nil, echo.Range(0, n), 0)
		if err != nil {
			sendErr = err
			return
		}
		if !req.Done() {
			pending = append(pending, req)
		}
	})
	if err != nil {
		return err
	}
	addr, err := w.PackAddress()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%x %x %d\n", addr, rkey, target.Address())

	lines := bufio.NewScanner(in)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() {
		return fmt.Errorf("no client address on stdin: %v", lines.Err())
	}
	caddr, err := hex.DecodeString(strings.TrimSpace(lines.Text()))
	if err != nil {
		return err
	}
	if ep, err = w.ConnectWorker(caddr, ucp.WithPeerErrorHandling(false)); err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")

	run, stop := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, in) // the client closes stdin when done
		stop()
	}()
	// Worker.Run's rounds, with the replies UCX did not complete at once
	// tested between them (a handler must not block on them).
	for run.Err() == nil {
		w.Wait(run)
		if len(pending) > 0 {
			batch := pending
			pending = nil
			for i := range batch {
				if done, _ := batch[i].Test(); !done {
					pending = append(pending, batch[i])
				}
			}
		}
	}
	bounded, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range pending {
		if pending[i].Wait(bounded) != nil {
			pending[i].Detach()
		}
	}
	ep.Close(bounded, ucp.CloseForce)
	return sendErr
}

// remote is the client side: a worker in this process with an endpoint to
// the peer process, the peer's remote key, and a local buffer.
type remote struct {
	w     *ucp.Worker
	ep    *ucp.Endpoint
	rkey  *ucp.RemoteKey
	rr    ucp.RemoteRegion // 8 bytes of the peer's target through rkey
	raddr uint64
	local *ucp.Mem
	got   int // echoes received (the handler runs on the goroutine that waits)
}

func newRemote(b *testing.B, tls string) *remote {
	spec := testproc.Spec{Role: "peer", Env: []string{peerTLSEnv + "=" + tls}, Stderr: true}
	if cpu := os.Getenv(peerCPUEnv); cpu != "" { // run.sh: the peer on its own core
		spec.Prefix = []string{"taskset", "-c", cpu}
	}
	peer := testproc.Start(b, spec)
	line := func() string {
		l, ok := peer.NextLine(b, time.Minute)
		if !ok {
			b.Fatalf("peer ended early:\n%s", peer.Output())
		}
		return l
	}
	f := strings.Fields(line())
	if len(f) != 3 {
		b.Fatalf("peer said %q", f)
	}
	paddr, err1 := hex.DecodeString(f[0])
	prkey, err2 := hex.DecodeString(f[1])
	raddr, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		b.Fatalf("peer said %q", f)
	}

	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", tls))
	if err != nil {
		b.Fatal(err)
	}
	w, err := ctx.NewWorker(clientSpin)
	if err != nil {
		b.Fatal(err)
	}
	r := &remote{w: w, raddr: raddr}
	if err := w.SetAMHandler(amID, func(*ucp.AMMessage) { r.got++ }); err != nil {
		b.Fatal(err)
	}
	if r.local, err = ctx.Allocate(4096); err != nil {
		b.Fatal(err)
	}
	if r.ep, err = w.ConnectWorker(paddr, ucp.WithPeerErrorHandling(false)); err != nil {
		b.Fatal(err)
	}
	if r.rkey, err = r.ep.UnpackRemoteKey(context.Background(), prkey); err != nil {
		b.Fatal(err)
	}
	if r.rr, err = r.rkey.Region(raddr, 8); err != nil {
		b.Fatal(err)
	}
	addr, err := w.PackAddress()
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(peer.Stdin(), "%x\n", addr)
	if s := line(); s != "ready" {
		b.Fatalf("peer said %q", s)
	}
	// Cleanups run last-in first-out: this one before the peer's stdin closes.
	b.Cleanup(func() {
		r.rkey.Close()
		r.ep.Close(context.Background(), ucp.CloseForce)
		r.local.Close()
		w.Close()
		ctx.Close()
	})
	return r
}

// pingPong sends 8 bytes and waits for the peer's echo.
func (r *remote) pingPong(b *testing.B, ctx context.Context) {
	want := r.got + 1
	req, err := r.ep.SendAMMem(amID, nil, r.local.Range(0, 8), 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := req.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	for r.got < want {
		if err := r.w.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func (r *remote) put8Flush(b *testing.B, ctx context.Context) {
	req, err := r.rr.PutMem(r.local.Range(0, 8), 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := req.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	if err := r.ep.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

func (r *remote) get8(b *testing.B, ctx context.Context) {
	req, err := r.rr.GetMem(r.local.Range(0, 8), 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := req.Wait(ctx); err != nil {
		b.Fatal(err)
	}
}

func benchRemote(b *testing.B, tls string, op func(*remote, *testing.B, context.Context)) {
	r := newRemote(b, tls)
	// A bound, not a measurement: a lost peer fails the benchmark, not CI.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for range warmup {
		op(r, b, ctx)
	}
	b.ReportAllocs()
	for b.Loop() {
		op(r, b, ctx)
	}
}

func BenchmarkAMPingPong8Shm(b *testing.B) { benchRemote(b, tlsShm, (*remote).pingPong) }
func BenchmarkAMPingPong8TCP(b *testing.B) { benchRemote(b, tlsTCP, (*remote).pingPong) }
func BenchmarkPut8FlushShm(b *testing.B)   { benchRemote(b, tlsShm, (*remote).put8Flush) }
func BenchmarkPut8FlushTCP(b *testing.B)   { benchRemote(b, tlsTCP, (*remote).put8Flush) }
func BenchmarkGet8Shm(b *testing.B)        { benchRemote(b, tlsShm, (*remote).get8) }
func BenchmarkGet8TCP(b *testing.B)        { benchRemote(b, tlsTCP, (*remote).get8) }
