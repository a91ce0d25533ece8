package bench

// Package share's data path against raw UCX: Region.ReadAt and
// Region.WriteAt of 64 MiB in rkey mode over tcp (on the machine's network
// address, testproc.HostIP), beside the
// same transfer made with ucp calls (gets or puts of one chunk each on a
// RemoteRegion, depth of them in flight, waited for in order; puts then
// flushed, as WriteAt does). The exporter and the raw target live in a
// peer process (this test binary as the role "share-peer", pinned like
// the other two-process rows' peer by BENCH_PEER_CPU; the exporter's
// session data path is a child process of it, which inherits the pinning,
// and serves shared memory from share.NewMemory); the importer and
// the raw client are this process, each with a UCX context of its own
// (UCX_TLS=tcp on every side), a worker progressed by a goroutine running
// Worker.Run (as the importer's is) and a 64 MiB Go buffer. Run with
//
//	go test ./bench -run '^$' -bench Share -benchmem
//
// (BenchmarkShareSweep* also try other chunk sizes and depths). run.sh
// runs BenchmarkShareRead64M and BenchmarkShareWrite64M (pinned, as the
// other two-process rows) beside the C twin's rows of the same names,
// which make the raw rows' transfer in C (twin.c, --region-peer: the same
// listener, endpoint, key, chunk, depth and order of waits; the C client
// busy-polls where the importer and the raw client here spin 50 µs and
// then sleep on the worker's event fd, beside a goroutine running
// Worker.Run).

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucp"
)

const (
	shareSize   = 64 << 20
	shareRegion = "bench"
)

// The sealing secret of both sides (a benchmark's, not a secret).
var shareSecret = []byte("ucx-go bench: share versus raw ucp")

func init() {
	testproc.Role("share-peer", func() int {
		if err := runSharePeer(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "share peer:", err)
			return 1
		}
		return 0
	})
}

// runSharePeer is the peer: an exporter in rkey mode sharing 64 MiB, and
// beside it a raw target (a context, a worker, a listener and 64 MiB
// registered the same way, packed with Mem.PackRegion). It prints "CTRL
// DATA PACKED" (the control address, the raw listener's address, the raw
// region in hex) and runs until its stdin closes.
func runSharePeer(in io.Reader, out io.Writer) error {
	sealer, err := share.NewHMACSealer(shareSecret)
	if err != nil {
		return err
	}
	mem, err := share.NewMemory(shareSize)
	if err != nil {
		return err
	}
	defer mem.Close() // after exp.Close
	buf := mem.Bytes()
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	exp, err := share.NewExporter(sealer, share.WithMode(share.ModeRkey), share.WithUCXConfig("TLS", tlsTCP))
	if err != nil {
		return err
	}
	defer exp.Close()
	if err := exp.Add(context.Background(), shareRegion, mem, share.ReadWrite); err != nil {
		return err
	}
	l, err := net.Listen("tcp", testproc.HostAddr())
	if err != nil {
		return err
	}
	go exp.Serve(l)

	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", tlsTCP), ucp.WithConfig("NET_DEVICES", rawDevices()), ucp.WithFeatures(ucp.FeatureRMA|ucp.FeatureAM))
	if err != nil {
		return err
	}
	defer ctx.Close()
	w, err := ctx.NewWorker()
	if err != nil {
		return err
	}
	defer w.Close()
	run, stop := context.WithCancel(context.Background())
	defer stop()
	go w.Run(run)
	raw := make([]byte, shareSize)
	m, err := ctx.Register(raw, ucp.WithProt(ucp.ProtAll))
	if err != nil {
		return err
	}
	defer m.Close()
	packed, err := m.PackRegion()
	if err != nil {
		return err
	}
	rl, err := w.Listen(testproc.HostAddr())
	if err != nil {
		return err
	}
	defer rl.Close()
	var eps []*ucp.Endpoint
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			ep, err := rl.Accept(run)
			if err != nil {
				return
			}
			eps = append(eps, ep)
		}
	}()
	fmt.Fprintf(out, "%s %s %x\n", l.Addr(), rl.Addr(), packed)
	io.Copy(io.Discard, in) // the client closes stdin when done
	stop()
	<-accepted
	for _, ep := range eps {
		ep.Close(context.Background(), ucp.CloseForce)
	}
	return nil
}

// rawDevices binds the raw rows' UCX to the device share's data paths
// use (share.DevicesFacing of the host address): with every device, UCX
// striped the raw transfer over tcp on lo and on the network device, a
// path share does not take.
func rawDevices() string {
	if d := share.DevicesFacing(netip.MustParseAddr(testproc.HostIP())); d != "" {
		return d
	}
	return "all"
}

// sharePeer is the client's view of the peer.
type sharePeer struct {
	pid        int // the peer process's (the exporter's)
	ctrl, data string
	packed     []byte
	buf        []byte // the client's 64 MiB, read into and written from
}

func startSharePeer(b *testing.B) *sharePeer {
	spec := testproc.Spec{Role: "share-peer", Stderr: true}
	if cpu := os.Getenv(peerCPUEnv); cpu != "" { // run.sh: the peer on its own core
		spec.Prefix = []string{"taskset", "-c", cpu}
	}
	peer := testproc.Start(b, spec)
	l, ok := peer.NextLine(b, time.Minute)
	if !ok {
		b.Fatalf("share peer ended early:\n%s", peer.Output())
	}
	f := strings.Fields(l)
	if len(f) != 3 {
		b.Fatalf("share peer said %q", l)
	}
	packed, err := hex.DecodeString(f[2])
	if err != nil {
		b.Fatalf("share peer said %q", l)
	}
	buf := make([]byte, shareSize)
	for i := range buf {
		buf[i] = byte(i * 3)
	}
	return &sharePeer{pid: peer.Pid(), ctrl: f[0], data: f[1], packed: packed, buf: buf}
}

// importer opens a session with the peer's exporter.
func (p *sharePeer) importer(b *testing.B, chunk, depth int) (*share.Importer, *share.Region) {
	sealer, err := share.NewHMACSealer(shareSecret)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	imp, err := share.Dial(ctx, "tcp", p.ctrl, sealer, share.WithRequireMode(share.ModeRkey),
		share.WithUCXConfig("TLS", tlsTCP), share.WithChunk(chunk), share.WithDepth(depth))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { imp.Close() })
	r, err := imp.Region(shareRegion)
	if err != nil {
		b.Fatal(err)
	}
	return imp, r
}

// rawRegion is the raw client: a context and worker like the importer's,
// an endpoint to the peer's raw listener, the raw region unpacked on it.
func (p *sharePeer) rawRegion(b *testing.B) ucp.RemoteRegion {
	ctx, err := ucp.NewContext(ucp.WithConfig("TLS", tlsTCP), ucp.WithConfig("NET_DEVICES", rawDevices()), ucp.WithFeatures(ucp.FeatureRMA|ucp.FeatureAM))
	if err != nil {
		b.Fatal(err)
	}
	w, err := ctx.NewWorker()
	if err != nil {
		b.Fatal(err)
	}
	run, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(run) }()
	uctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ep, err := w.Connect(uctx, p.data)
	if err != nil {
		b.Fatal(err)
	}
	rr, err := ep.UnpackRegion(uctx, p.packed)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		rr.Key().Close()
		ep.Close(context.Background(), ucp.CloseForce)
		stop()
		<-done
		w.Close()
		ctx.Close()
	})
	return rr
}

// rawMove is what Region.ReadAt and WriteAt do, in ucp calls: chunks of
// chunk bytes, depth in flight, each waited for in the order started;
// puts are then flushed.
type rawMove struct {
	rr           ucp.RemoteRegion
	chunk, depth int
	ring         []ucp.Request
}

// Waits take context.Background(), as the importer's do: a ctx with a
// deadline costs an allocation per wait.
func (m *rawMove) run(p []byte, write bool) error {
	ctx := context.Background()
	head, tail, next := 0, 0, 0
	for {
		for next < len(p) && tail-head < m.depth {
			end := min(next+m.chunk, len(p))
			var req ucp.Request
			var err error
			if write {
				req, err = m.rr.Put(p[next:end], next)
			} else {
				req, err = m.rr.Get(p[next:end], next)
			}
			if err != nil {
				return err
			}
			m.ring[tail%m.depth] = req
			tail++
			next = end
		}
		if head == tail {
			break
		}
		if err := m.ring[head%m.depth].Wait(ctx); err != nil {
			return err
		}
		head++
	}
	if write {
		return m.rr.Flush(ctx)
	}
	return nil
}

// The rows: each moves the whole 64 MiB once per operation.
// One untimed operation first completes the wire-up (lanes, the
// key's transport keys) before the loop.
func benchShareRegion(b *testing.B, r *share.Region, buf []byte, write bool) {
	op := func() {
		var err error
		if write {
			_, err = r.WriteAt(buf, 0)
		} else {
			_, err = r.ReadAt(buf, 0)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	op()
	b.SetBytes(shareSize)
	b.ReportAllocs()
	for b.Loop() {
		op()
	}
}

func benchRaw(b *testing.B, rr ucp.RemoteRegion, buf []byte, chunk, depth int, write bool) {
	m := &rawMove{rr: rr, chunk: chunk, depth: depth, ring: make([]ucp.Request, depth)}
	op := func() {
		if err := m.run(buf, write); err != nil {
			b.Fatal(err)
		}
	}
	op()
	b.SetBytes(shareSize)
	b.ReportAllocs()
	for b.Loop() {
		op()
	}
}

// benchShare runs share and raw side by side at each (chunk, depth).
func benchShare(b *testing.B, write bool, configs [][2]int) {
	p := startSharePeer(b)
	rr := p.rawRegion(b)
	for _, c := range configs {
		chunk, depth := c[0], c[1]
		name := ""
		if len(configs) > 1 {
			name = fmt.Sprintf("/chunk=%dK/depth=%d", chunk>>10, depth)
		}
		// share: into and out of a Buffer the importer hands out (no copy
		// in this process); share-slice: a Go slice (one copy through the
		// staging file).
		b.Run("share"+name, func(b *testing.B) {
			imp, r := p.importer(b, chunk, depth)
			buf, err := imp.NewBuffer(shareSize)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { buf.Close() })
			copy(buf.Bytes(), p.buf)
			benchShareRegion(b, r, buf.Bytes(), write)
		})
		b.Run("share-slice"+name, func(b *testing.B) {
			_, r := p.importer(b, chunk, depth)
			benchShareRegion(b, r, p.buf, write)
		})
		b.Run("raw"+name, func(b *testing.B) { benchRaw(b, rr, p.buf, chunk, depth, write) })
	}
}

var shareDefaults = [][2]int{{share.DefaultChunk, share.DefaultDepth}}

func BenchmarkShareRead64M(b *testing.B)  { benchShare(b, false, shareDefaults) }
func BenchmarkShareWrite64M(b *testing.B) { benchShare(b, true, shareDefaults) }

// The sweep: chunk sizes from 64 KiB to 1 MiB, depths 4 to 16.
func shareSweep() [][2]int {
	var out [][2]int
	for _, chunk := range []int{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20} {
		for _, depth := range []int{4, 8, 16} {
			out = append(out, [2]int{chunk, depth})
		}
	}
	return out
}

func BenchmarkShareSweepRead64M(b *testing.B)  { benchShare(b, false, shareSweep()) }
func BenchmarkShareSweepWrite64M(b *testing.B) { benchShare(b, true, shareSweep()) }

// BenchmarkShareSession is a session's life as an importer sees it, over
// tcp: Dial (the handshake; in rkey mode the start of the session's data
// path, the UCX wire-up and the grants), the first 8-byte ReadAt, Close.
// It also reports what one open session costs the exporter's host: the
// resident memory and descriptors of its data-path process.
func BenchmarkShareSession(b *testing.B) {
	p := startSharePeer(b)
	sealer, err := share.NewHMACSealer(shareSecret)
	if err != nil {
		b.Fatal(err)
	}
	open := func() (*share.Importer, *share.Region) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		imp, err := share.Dial(ctx, "tcp", p.ctrl, sealer, share.WithRequireMode(share.ModeRkey),
			share.WithUCXConfig("TLS", tlsTCP))
		if err != nil {
			b.Fatal(err)
		}
		r, err := imp.Region(shareRegion)
		if err != nil {
			b.Fatal(err)
		}
		return imp, r
	}
	buf := make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		imp, r := open()
		if _, err := r.ReadAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		imp.Close()
	}
	b.StopTimer()
	imp, _ := open()
	defer imp.Close()
	var rssKiB, fds, kids float64
	for _, kid := range testproc.Children(p.pid) {
		kids++
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", kid))
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				var n float64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &n)
				rssKiB += n
			}
		}
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", kid))
		fds += float64(len(ents))
	}
	b.ReportMetric(kids, "procs/session")
	b.ReportMetric(rssKiB, "rss-KiB/session")
	b.ReportMetric(fds, "fds/session")
}
