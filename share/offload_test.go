package share_test

// Offload with three processes, in rkey mode: the host (the exporter
// role), the DPU (this process, the importer) and a third peer (the peer
// role, a UCX listener with memory of its own). The DPU moves the host
// region's bytes to and from the peer; whichever side receives them checks
// them.

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

// shifted is the seed of pattern(n, seed)'s bytes from off on:
// pattern(size, seed)[off:] is pattern(size-off, shifted(seed, off)).
func shifted(seed byte, off int) byte { return seed + byte(off*7) }

// CopyTo (host to peer), CopyFrom (peer to host), SendAM (host bytes to the
// peer as one rendezvous active message) and ReceiveAM (a peer's active
// message landed in the host region), at odd offsets and lengths, through
// a staging buffer smaller than the region (so that copies go through it
// in several chunks, both halves); bytes outside each range stay as they
// were.
func TestOffloadThreeProcesses(t *testing.T) {
	t.Parallel()
	const (
		size    = 1<<20 + 4093 // the host's region and the peer's memory
		staging = 512 << 10
	)
	host, addr := startExporter(t, nil, "-mode", "rkey", "-regions", fmt.Sprintf("h:%d:11:rw", size))
	peer := testproc.Start(t, testproc.Spec{Role: rolePeer, Args: []string{"-size", fmt.Sprint(size), "-seed", "21"}})
	peerAddr := peer.WaitLine(t, "ADDR", bound)

	imp := dial(t, addr, share.WithRequireMode(share.ModeRkey), share.WithStaging(staging), share.WithChunk(128<<10))
	require.Equal(t, share.ModeRkey, imp.Mode())
	hr, err := imp.Region("h")
	require.NoError(t, err)
	// The peer sends its region once connected: the queue comes first.
	regionQ, err := imp.OpenAMQueue(amPeerRegion)
	require.NoError(t, err)
	defer regionQ.Close()
	dataQ, err := imp.OpenAMQueue(amToDPU)
	require.NoError(t, err)
	defer dataQ.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	pe, err := imp.ConnectPeer(ctx, peerAddr)
	require.NoError(t, err)
	defer pe.Close() // on failure; closed below otherwise
	m, err := regionQ.Receive(ctx)
	require.NoError(t, err)
	peer.WaitLine(t, "SENT-REGION", bound)
	require.False(t, m.IsRendezvous())
	pr, err := pe.UnpackRegion(ctx, m.Data)
	require.NoError(t, err)
	defer pr.Close()
	require.GreaterOrEqual(t, pr.Len(), size, "the peer's memory (Allocate rounds it up)")

	hostCheck := func(seed byte, off, n int) string {
		return ask(t, host, fmt.Sprintf("check h %d %d %d", seed, off, n), "CHECK")
	}
	peerCheck := func(seed byte, off, n int) string {
		return ask(t, peer, fmt.Sprintf("check %d %d %d", seed, off, n), "CHECK")
	}

	// CopyTo: all of the host's region into the peer's memory.
	start := time.Now()
	require.NoError(t, hr.CopyTo(ctx, pr.Range(0, size), 0))
	t.Logf("CopyTo %d bytes: %v", size, time.Since(start).Round(time.Microsecond))
	assert.Equal(t, "ok", peerCheck(11, 0, size), "the peer's memory after CopyTo")

	// CopyFrom: n bytes of the peer (pattern 31) from srcOff into the host
	// region at off.
	require.Equal(t, "", ask(t, peer, "fill 31", "FILLED"))
	const srcOff, off, n = 1000, 3001, 700001
	start = time.Now()
	require.NoError(t, hr.CopyFrom(ctx, pr.Range(srcOff, n), off))
	t.Logf("CopyFrom %d bytes: %v", n, time.Since(start).Round(time.Microsecond))
	assert.Equal(t, "ok", hostCheck(shifted(31, srcOff), off, n), "the host's region after CopyFrom")
	assert.Equal(t, "ok", hostCheck(11, 0, off), "the host's bytes before the range")
	assert.Equal(t, "ok", hostCheck(shifted(11, off+n), off+n, size-off-n), "the host's bytes after the range")

	// SendAM: staging-3 bytes of the host region from offset 5 (pattern
	// 41 there) as one active message, which the peer receives and checks
	// against the seed in its header.
	require.Equal(t, "", ask(t, host, "fill h 41", "FILLED"))
	const amOff, amLen = 5, staging - 3
	require.NoError(t, hr.SendAM(ctx, pe, amToPeer, []byte{shifted(41, amOff)}, amOff, amLen))
	assert.Equal(t, fmt.Sprintf("ok rndv=true len=%d", amLen), peer.WaitLine(t, "AM", bound), "the peer received the host's bytes")

	// ReceiveAM: the peer sends staging-1 bytes (pattern 51); the DPU lands
	// them in the host region at offset 777.
	const rOff, rLen = 777, staging - 1
	_, err = fmt.Fprintf(peer.Stdin(), "sendam 51 %d\n", rLen)
	require.NoError(t, err)
	msg, err := dataQ.Receive(ctx)
	require.NoError(t, err)
	assert.True(t, msg.IsRendezvous())
	got, err := hr.ReceiveAM(ctx, msg, rOff)
	require.NoError(t, err)
	assert.Equal(t, rLen, got)
	assert.Equal(t, "err=<nil>", peer.WaitLine(t, "SENTAM", bound))
	assert.Equal(t, "ok", hostCheck(51, rOff, rLen), "the host's region after ReceiveAM")
	assert.Equal(t, "ok", hostCheck(41, 0, rOff), "the host's bytes before the range")
	assert.Equal(t, "ok", hostCheck(shifted(41, rOff+rLen), rOff+rLen, size-rOff-rLen), "the host's bytes after the range")

	st := imp.Stats()
	assert.Equal(t, int64(2), st.Reads, "CopyTo and SendAM")
	assert.Equal(t, int64(2), st.Writes, "CopyFrom and ReceiveAM")
	assert.Equal(t, int64(size+amLen), st.BytesRead)
	assert.Equal(t, int64(n+rLen), st.BytesWritten)
	assert.Zero(t, st.Errors)

	assert.NoError(t, pr.Close())
	assert.NoError(t, pe.Close())
	peer.CloseStdin()
	peer.WaitLine(t, "DONE", bound)
	assert.Equal(t, 0, peer.Wait(t, bound), "the peer's exit code")
	require.NoError(t, imp.Close())
	host.CloseStdin()
	assert.Equal(t, "err=<nil>", host.WaitLine(t, "CLOSED", bound))
	assert.Equal(t, 0, host.Wait(t, bound), "the host's exit code")
}

// Offload the way a newcomer misuses it: a peer region of one importer
// handed to another importer's region is refused; a Receive waiting when
// the importer closes returns ErrClosed; the peer, its region and the
// queue close after the importer with no error.
func TestOffloadNewcomerMisuse(t *testing.T) {
	t.Parallel()
	mem := memory(t, pattern(65536, 3))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadWrite))
	peer := testproc.Start(t, testproc.Spec{Role: rolePeer, Args: []string{"-size", "65536"}})
	peerAddr := peer.WaitLine(t, "ADDR", bound)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	imp := dial(t, addr)
	q, err := imp.OpenAMQueue(amPeerRegion)
	require.NoError(t, err)
	_, err = imp.OpenAMQueue(amPeerRegion)
	require.ErrorIs(t, err, ucs.ErrBusy, "a second queue for one id")
	pe, err := imp.ConnectPeer(ctx, peerAddr)
	require.NoError(t, err)
	m, err := q.Receive(ctx)
	require.NoError(t, err)
	pr, err := pe.UnpackRegion(ctx, m.Data)
	require.NoError(t, err)

	other := dial(t, addr)
	r2, err := other.Region("a")
	require.NoError(t, err)
	err = r2.CopyTo(ctx, pr.Range(0, 8), 0)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.Contains(t, err.Error(), "not of this region's importer")
	r, err := imp.Region("a")
	require.NoError(t, err)
	require.ErrorIs(t, r.CopyTo(ctx, pr.Range(pr.Len()-4, 8), 0), ucs.ErrOutOfRange, "past the peer's region")
	require.NoError(t, r.CopyTo(ctx, pr.Range(0, 4096), 0))
	assert.Equal(t, "ok", ask(t, peer, "check 3 0 4096", "CHECK"))

	waiting := make(chan error, 1)
	go func() {
		_, err := q.Receive(context.Background())
		waiting <- err
	}()
	time.Sleep(50 * time.Millisecond) // the goroutine waits in Receive
	require.NoError(t, imp.Close())
	select {
	case err := <-waiting:
		require.ErrorIs(t, err, ucs.ErrClosed)
	case <-time.After(bound):
		t.Fatal("Receive did not return after the importer's Close")
	}
	assert.NoError(t, pr.Close())
	assert.NoError(t, pe.Close())
	assert.NoError(t, q.Close())
	_, err = imp.ConnectPeer(ctx, peerAddr)
	require.ErrorIs(t, err, ucs.ErrClosed)
	peer.CloseStdin()
	peer.WaitLine(t, "DONE", bound)
}

// SendAM honours its ctx: to a peer that stops receiving (its process
// stopped, so the rendezvous cannot complete), it returns with
// ucs.ErrTimedOut once ctx ends; the message goes out when the peer runs
// again, and the next offload call, which waits for it, succeeds.
func TestNewcomerSendAMHonoursCtx(t *testing.T) {
	t.Parallel()
	const size = 256 << 10
	mem := memory(t, pattern(size, 41))
	e, addr := serve(t)
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	peer := testproc.Start(t, testproc.Spec{Role: rolePeer, Args: []string{"-size", fmt.Sprint(size)}})
	peerAddr := peer.WaitLine(t, "ADDR", bound)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	imp := dial(t, addr)
	r, err := imp.Region("a")
	require.NoError(t, err)
	pe, err := imp.ConnectPeer(ctx, peerAddr)
	require.NoError(t, err)
	defer pe.Close()

	require.NoError(t, syscall.Kill(peer.Pid(), syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(peer.Pid(), syscall.SIGCONT)
		}
	}()
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	done := make(chan error, 1)
	go func() { done <- r.SendAM(short, pe, amToPeer, []byte{41}, 0, size) }()
	select {
	case err = <-done:
	case <-time.After(bound):
		t.Fatal("SendAM did not return after its ctx ended")
	}
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.NoError(t, imp.Err(), "the session goes on")

	require.NoError(t, syscall.Kill(peer.Pid(), syscall.SIGCONT))
	stopped = false
	assert.Equal(t, fmt.Sprintf("ok rndv=true len=%d", size), peer.WaitLine(t, "AM", bound), "the message sent once the peer ran again")
	require.NoError(t, r.SendAM(ctx, pe, amToPeer, []byte{41}, 0, size), "the next call")
	assert.Equal(t, fmt.Sprintf("ok rndv=true len=%d", size), peer.WaitLine(t, "AM", bound))
}
