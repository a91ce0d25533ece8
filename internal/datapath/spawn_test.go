package datapath

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A data-path process gets SIGKILL when its parent dies (Pdeathsig), and
// Linux sends it when the thread that forked it ends: a process started
// by a goroutine that then exits locked to its thread (the Go runtime
// ends that thread) must live on.
func TestProcOutlivesTheThreadThatStartedIt(t *testing.T) {
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	cfg := Config{Name: "spawn-test", Listen: lo, Peer: lo, AMBind: 0x5e01}
	started := make(chan *Proc, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p, err := Start(ctx, cfg, func([]byte) bool { return false })
		if err != nil {
			t.Error(err)
		}
		started <- p
	}()
	p := <-started
	require.NotNil(t, p)
	defer p.Close()
	select { // the signal would come as the thread ends, right after the goroutine
	case <-p.Done():
		t.Fatalf("the data path died with the thread that started it: %v", p.Err())
	case <-time.After(time.Second):
	}
}
