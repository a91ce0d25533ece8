package share_test

// Review of the atomics against a hostile importer (it holds the secret,
// follows the handshake, then speaks UCX to the exporter's data path as it
// likes): floods, races with Remove, requests with data, answers it never
// takes, answer-id messages sent to the exporter.

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucp"
)

// reviewReq is an atomic request header (docs/share-protocol.md).
func reviewReq(op, size byte, seq, gen, off, operand, compare uint64) []byte {
	b := make([]byte, 48)
	b[0], b[1] = op, size
	le := binary.LittleEndian
	le.PutUint64(b[8:], seq)
	le.PutUint64(b[16:], gen)
	le.PutUint64(b[24:], off)
	le.PutUint64(b[32:], operand)
	le.PutUint64(b[40:], compare)
	return b
}

// procStatus is a field of /proc/pid/status ("VmRSS", "Threads"), as a
// number (kB for sizes); -1 when the process is gone.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n
		}
	}
	return -1
}

// pageOf is the whole first page of m's mapping: the granted bytes and the
// tail of the page that no grant covers.
func pageOf(m *share.Memory) []byte { return unsafe.Slice(&m.Bytes()[0], 4096) }

// A flood of atomic requests (50000, a fifth of them outside the grant),
// sent without waiting for answers: the data path answers each, performs
// each granted one once, stays alive, the bytes beside the word and the
// page's tail past the grant never change, and the exporter serves the
// next importer. (Its RSS grows by some 25 MiB, 110 MiB under -race:
// logged.)
func TestReviewHostileAtomicFlood(t *testing.T) {
	const n = 50000
	mem := newMemory(t, make([]byte, 4000)) // the page's last 96 bytes are not granted
	tail := bytes.Repeat([]byte{0xa5}, 96)
	copy(pageOf(mem)[4000:], tail)
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "rw", mem, share.ReadWrite))
	h := dialHostile(t, addr)
	dp := dataPathListeningOn(t, h.port)
	rss0 := procStatus(dp, "VmRSS")
	var answers atomic.Int64
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(m *ucp.AMMessage) { answers.Add(1) }))
	gen := h.grants["rw"].gen
	start := time.Now()
	for i := range n {
		off := uint64(0)
		if i%5 == 4 {
			off = 4000 - 4 // outside for 8 bytes: refused
		}
		req, err := h.ep.SendAM(0x5e02, reviewReq(1, 8, uint64(i), gen, off, 1, 0), nil, ucp.AMReply)
		require.NoError(t, err)
		req.Detach()
	}
	sent := time.Since(start)
	require.Eventually(t, func() bool { return answers.Load() == n }, 8*time.Second, 10*time.Millisecond, "answers: %d of %d", answers.Load(), n)
	t.Logf("%d requests sent in %v, answered in %v; data path RSS %d -> %d kB, %d threads", n, sent, time.Since(start), rss0, procStatus(dp, "VmRSS"), procStatus(dp, "Threads"))
	assert.Equal(t, uint64(n-n/5), atomic.LoadUint64(word64(mem, 0)), "each granted add once")
	assert.Equal(t, make([]byte, 4000-8), mem.Bytes()[8:], "bytes beside the word changed")
	assert.Equal(t, tail, pageOf(mem)[4000:], "the page's tail outside the grant changed")
	assert.True(t, processAlive(dp), "the data path died")
	assert.Len(t, e.Sessions(), 1, "the session ended")
	stillServes(t, addr, "rw", append(binary.LittleEndian.AppendUint64(nil, uint64(n-n/5)), make([]byte, 4000-8)...))
}

// A well-behaved importer's atomics on the word a hostile floods: both
// sessions' adds land, none lost, and the well-behaved one's calls all
// succeed while the flood runs.
func TestReviewHostileFloodBesideAGoodImporter(t *testing.T) {
	mem := newMemory(t, make([]byte, 64))
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "rw", mem, share.ReadWrite))
	h := dialHostile(t, addr)
	good := dial(t, addr)
	r, err := good.Region("rw")
	require.NoError(t, err)
	var answered atomic.Int64
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(*ucp.AMMessage) { answered.Add(1) }))
	gen := h.grants["rw"].gen
	flooded := make(chan int)
	go func() {
		n := 0
		for start := time.Now(); time.Since(start) < floodTime(2*time.Second); n++ {
			req, err := h.ep.SendAM(0x5e02, reviewReq(1, 8, uint64(n), gen, 0, 1, 0), nil, ucp.AMReply)
			if err != nil {
				break
			}
			req.Detach()
		}
		flooded <- n
	}()
	var calls int
	var slowest time.Duration
	for start := time.Now(); time.Since(start) < floodTime(2*time.Second); calls++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		_, err := r.FetchAdd64(ctx, 0, 1<<32)
		cancel()
		require.NoError(t, err, "the well-behaved importer's call %d", calls)
		slowest = max(slowest, time.Since(t0))
	}
	n := <-flooded
	require.Eventually(t, func() bool { return answered.Load() == int64(n) }, 8*time.Second, 10*time.Millisecond)
	t.Logf("hostile: %d adds; well-behaved: %d calls, the slowest %v", n, calls, slowest)
	assert.Equal(t, uint64(calls)<<32+uint64(n), atomic.LoadUint64(word64(mem, 0)), "an add was lost")
	assert.Len(t, e.Sessions(), 2)
}

// procCPU is the user and system CPU time a process has used.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ 100
}

// A hostile that never takes its answers (nobody progresses its worker,
// so they fill its socket and wait in the exporter's data path) while its
// requests keep coming: the data path stops taking requests once its
// answers cannot leave (flow control bounds what it holds: 25 to 45 MiB
// measured without -race, near 200 MiB with it), stays alive, and once
// the hostile reads again performs every request exactly once.
func TestReviewHostileAnswersNeverTaken(t *testing.T) {
	mem := newMemory(t, make([]byte, 4096))
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "rw", mem, share.ReadWrite))
	h := dialHostile(t, addr)
	dp := dataPathListeningOn(t, h.port)
	rss0 := procStatus(dp, "VmRSS")
	gen := h.grants["rw"].gen
	var answered atomic.Int64
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(*ucp.AMMessage) { answered.Add(1) }))
	h.stop() // nobody progresses the hostile's worker from here
	var pending []ucp.Request
	start := time.Now()
	sent := 0
	for ; time.Since(start) < floodTime(3*time.Second) && len(pending) < 2000; sent++ {
		req, err := h.ep.SendAM(0x5e02, reviewReq(1, 8, uint64(sent), gen, 8, 1, 0), nil, ucp.AMReply)
		require.NoError(t, err)
		if !req.Done() {
			pending = append(pending, req) // the hostile's own socket is full: the data path stopped reading
		} else {
			req.Detach()
		}
	}
	time.Sleep(500 * time.Millisecond)
	held := atomic.LoadUint64(word64(mem, 8))
	t.Logf("%d requests sent in %v, %d performed with their answers held; data path RSS %d -> %d kB",
		sent, time.Since(start).Round(time.Millisecond), held, rss0, procStatus(dp, "VmRSS"))
	for _, r := range pending {
		r.Detach()
	}
	run, stop := context.WithCancel(context.Background())
	h.stop = stop
	go h.w.Run(run)
	require.Eventually(t, func() bool { return answered.Load() == int64(sent) }, 8*time.Second, 10*time.Millisecond,
		"answers %d of %d once the hostile reads again", answered.Load(), sent)
	assert.Equal(t, uint64(sent), atomic.LoadUint64(word64(mem, 8)), "each request performed once")
	assert.Zero(t, atomic.LoadUint64(word64(mem, 0)))
	assert.True(t, processAlive(dp), "the data path died")
	assert.Len(t, e.Sessions(), 1)
}

// flood sends msgs copies of (id, header, data) as fast as the hostile
// can for at most d, and returns how many went.
func (h *hostile) flood(id ucp.AMID, header, data []byte, msgs int, d time.Duration) int {
	start := time.Now()
	n := 0
	for ; n < msgs && time.Since(start) < d; n++ {
		req, err := h.ep.SendAM(id, header, data, ucp.AMReply)
		require.NoError(h.t, err)
		req.Detach()
	}
	return n
}

// Answer-id messages (0x5e03) sent to the exporter's data path, which has
// no handler for them, malformed requests, and an id nobody handles, 200000
// each at a flood rate: no byte changes, the data path and the session
// live, and the next atomic is served. The CPU they cost this process
// (exporter and hostile) and the data path is logged: the same for the
// three.
func TestReviewHostileAnswerIDToExporter(t *testing.T) {
	mem := newMemory(t, make([]byte, 4096))
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "rw", mem, share.ReadWrite))
	h := dialHostile(t, addr)
	dp := dataPathListeningOn(t, h.port)
	gen := h.grants["rw"].gen
	answers := make(chan []byte, 16)
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(m *ucp.AMMessage) { answers <- append([]byte(nil), m.Header...) }))
	self := os.Getpid()
	measure := func(what string, id ucp.AMID, header []byte) {
		cpu0, dcpu0 := procCPU(self), procCPU(dp)
		start := time.Now()
		n := h.flood(id, header, nil, floodCount(200000), floodTime(2*time.Second))
		time.Sleep(500 * time.Millisecond)
		t.Logf("%s: %d messages in %v; this process (exporter and hostile) %v CPU, data path %v CPU", what, n, time.Since(start).Round(time.Millisecond), procCPU(self)-cpu0, procCPU(dp)-dcpu0)
	}
	measure("malformed requests (ignored)", 0x5e02, make([]byte, 47))
	measure("answers sent to the exporter", 0x5e03, make([]byte, 24))
	measure("an id nobody handles", 0x7777, []byte{1})
	assert.Equal(t, make([]byte, 4096), mem.Bytes(), "a message changed a byte")
	st, v, answered := h.atomicRaw(reviewReq(2, 8, 5, gen, 0, 9, 0), answers)
	require.True(t, answered)
	assert.Zero(t, st)
	assert.Zero(t, v)
	assert.Equal(t, uint64(9), atomic.LoadUint64(word64(mem, 0)))
	assert.True(t, processAlive(dp))
	assert.Len(t, e.Sessions(), 1)
}

// Requests that carry data (eager and rendezvous, up to 8 MiB, 200 of
// 256 KiB at once never received), which the protocol's request does not
// have ("header 48 bytes, no data"): the data path stays alive and no byte
// but the word the header names changes (the data lands nowhere). The
// data path performs such requests (logged): docs/share-protocol.md lists
// what it answers nothing to, and data is not among them.
func TestReviewHostileAtomicWithData(t *testing.T) {
	mem := newMemory(t, make([]byte, 4096))
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "rw", mem, share.ReadWrite))
	h := dialHostile(t, addr)
	dp := dataPathListeningOn(t, h.port)
	gen := h.grants["rw"].gen
	answers := make(chan []byte, 1024)
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(m *ucp.AMMessage) { answers <- append([]byte(nil), m.Header...) }))
	for i, size := range []int{8, 4096, 1 << 20, 8 << 20} {
		data := bytes.Repeat([]byte{0xee}, size)
		req, err := h.ep.SendAM(0x5e02, reviewReq(1, 8, uint64(i), gen, 8, 1, 0), data, ucp.AMReply)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = req.Wait(ctx)
		cancel()
		t.Logf("a request with %d bytes of data: send %v", size, err)
	}
	// Many rendezvous requests at once, their data never received.
	big := bytes.Repeat([]byte{0xee}, 256<<10)
	var reqs []ucp.Request
	for i := range 200 {
		req, err := h.ep.SendAM(0x5e02, reviewReq(1, 8, uint64(100+i), gen, 8, 1, 0), big, ucp.AMReply|ucp.AMRndv)
		require.NoError(t, err)
		reqs = append(reqs, req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	for _, r := range reqs {
		r.Wait(ctx)
	}
	time.Sleep(200 * time.Millisecond)
	performed := atomic.LoadUint64(word64(mem, 8))
	t.Logf("%d of 204 requests with data performed; %d answers; data path RSS %d kB", performed, len(answers), procStatus(dp, "VmRSS"))
	want := make([]byte, 4096)
	binary.LittleEndian.PutUint64(want[8:], performed)
	assert.Equal(t, want, mem.Bytes(), "data landed in the region")
	assert.True(t, processAlive(dp), "the data path died")
	assert.Len(t, e.Sessions(), 1)
}

// The hostile streams atomics on a region's generation while Remove (which
// it never acknowledges) unmaps it at the ctx's end: the data path
// survives, each performed add was answered as performed, the word never
// changes after Remove returned, and the session's other region and a
// well-behaved importer go on.
func TestReviewHostileAtomicsRaceRemove(t *testing.T) {
	gone := newMemory(t, make([]byte, 4096))
	keep := newMemory(t, []byte("kept region....."))
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "gone", gone, share.ReadWrite))
	require.NoError(t, e.Add(context.Background(), "keep", keep, share.ReadWrite))
	h := dialHostile(t, addr) // never reads its control connection: no ack
	dp := dataPathListeningOn(t, h.port)
	gen, keepGen := h.grants["gone"].gen, h.grants["keep"].gen
	var ok, refused atomic.Int64
	keepAnswer := make(chan []byte, 1)
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(m *ucp.AMMessage) {
		seq := binary.LittleEndian.Uint64(m.Header)
		switch {
		case seq == 1<<62:
			keepAnswer <- append([]byte(nil), m.Header...)
		case int8(m.Header[8]) == 0:
			ok.Add(1)
		default:
			refused.Add(1)
		}
	}))
	stop := make(chan struct{})
	streamed := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				streamed <- n
				return
			default:
			}
			for range 100 {
				req, err := h.ep.SendAM(0x5e02, reviewReq(1, 8, uint64(n), gen, 0, 1, 0), nil, ucp.AMReply)
				if err != nil {
					streamed <- n
					return
				}
				req.Detach()
				n++
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := e.Remove(ctx, "gone")
	require.ErrorIs(t, err, share.ErrTimedOut)
	after := atomic.LoadUint64(word64(gone, 0))
	copy(gone.Bytes()[8:], "reused after Remove") // the memory is the host's again
	time.Sleep(300 * time.Millisecond)
	close(stop)
	n := <-streamed
	time.Sleep(300 * time.Millisecond) // the last answers
	t.Logf("%d requests: %d performed, %d refused; the word was %d at Remove's return", n, ok.Load(), refused.Load(), after)
	assert.Equal(t, after, atomic.LoadUint64(word64(gone, 0)), "the word changed after Remove returned")
	assert.Equal(t, uint64(ok.Load()), after, "performed answers and the word disagree")
	assert.Positive(t, refused.Load(), "no request met the unmapped generation")
	assert.Equal(t, "reused after Remove", string(gone.Bytes()[8:8+len("reused after Remove")]))
	require.True(t, processAlive(dp), "the data path died")
	require.Len(t, e.Sessions(), 1, "the session ended")
	req, err := h.ep.SendAM(0x5e02, reviewReq(1, 4, 1<<62, keepGen, 12, 1, 0), nil, ucp.AMReply)
	require.NoError(t, err)
	req.Detach()
	select {
	case a := <-keepAnswer:
		assert.Zero(t, int8(a[8]), "the kept region's atomic was refused")
	case <-time.After(5 * time.Second):
		t.Fatal("no answer on the kept region")
	}
	stillServes(t, addr, "keep", []byte("kept region.....")[:12])
}

// Atomics from an endpoint that is not the bound one (a second connection
// the importer's host made to the data path before the bind) reach
// nothing: no answer, no byte changed, the bound endpoint served
// (docs/security.md claims "requests from any endpoint but the bound one
// are ignored" for TestContainedAtomicsRefused, which sends from the bound
// endpoint only). Here the bind cuts that endpoint first: its sends fail.
func TestReviewHostileAtomicsFromOtherEndpoint(t *testing.T) {
	mem := newMemory(t, make([]byte, 64))
	e, addr := serve(t, share.WithMode(share.ModeRkey))
	require.NoError(t, e.Add(context.Background(), "rw", mem, share.ReadWrite))
	h := proveHostile(t, addr, sealer(t))
	host, _, _ := strings.Cut(addr, ":")
	other := connectUCX(t, host+":"+strconv.Itoa(int(h.port))) // pending at the data path: not bound
	h.bind(addr)
	gen := h.grants["rw"].gen
	answers := make(chan []byte, 16)
	require.NoError(t, other.w.SetAMHandler(0x5e03, func(m *ucp.AMMessage) { answers <- append([]byte(nil), m.Header...) }))
	for i := range 20 {
		req, err := other.ep.SendAM(0x5e02, reviewReq(2, 8, uint64(i), gen, 0, 1, 0), nil, ucp.AMReply)
		if err != nil {
			t.Logf("the other endpoint's send %d: %v", i, err)
			break
		}
		req.Detach()
	}
	select {
	case a := <-answers:
		t.Fatalf("the other endpoint got an answer: %x", a)
	case <-time.After(time.Second):
	}
	assert.Equal(t, make([]byte, 64), mem.Bytes(), "an atomic from another endpoint landed")
	// The bound endpoint is served.
	mine := make(chan []byte, 1)
	require.NoError(t, h.w.SetAMHandler(0x5e03, func(m *ucp.AMMessage) { mine <- append([]byte(nil), m.Header...) }))
	st, _, answered := h.atomicRaw(reviewReq(2, 8, 1, gen, 0, 1, 0), mine)
	require.True(t, answered)
	assert.Zero(t, st)
	assert.Equal(t, uint64(1), atomic.LoadUint64(word64(mem, 0)))
	assert.Len(t, e.Sessions(), 1)
}

// floodTime and floodCount size a flood: in full under make stress, a
// quarter (a tenth of the count) in make test, whose 3-minute budget the
// flood would otherwise take a good part of.
func floodTime(d time.Duration) time.Duration {
	if testproc.Stress() > 0 {
		return d
	}
	return d / 4
}

func floodCount(n int) int {
	if testproc.Stress() > 0 {
		return n
	}
	return n / 10
}
