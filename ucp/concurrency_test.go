package ucp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/ucp"
)

const amConcurrent = 21

// The thread contract: every handle may be used from any goroutine. Many
// goroutines share one client worker and four endpoints (two to each of two
// server workers) and mix puts and gets from slices and mapped memory,
// active messages (eager and rendezvous), endpoint and worker flushes,
// waiting with Wait and polling with Test; meanwhile other goroutines call
// Progress and Worker.Wait on the client, and Progress on servers that Run.
// Every byte is verified.
func TestConcurrentWorkersEndpointsMixedOps(t *testing.T) {
	for _, tc := range []struct {
		name, tls string
		peerErr   bool
		ops       int
	}{{"shm", "posix,sysv,self", false, 120}, {"tcp", "tcp", true, 40}} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Goroutines(t)
			concurrentMixedOps(t, tc.tls, tc.peerErr, tc.ops)
		})
	}
}

// amTally checks and counts the active messages one server receives.
type amTally struct {
	received atomic.Int64
	mu       sync.Mutex
	errs     []error
}

func (a *amTally) fail(err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
}

// amPayload is the data of message i of goroutine g: its length and bytes
// follow from the header, so the receiver can check it alone.
func amPayload(g, i int) []byte {
	n := 16 + (g*31+i*17)%1024
	if i%10 == 9 {
		n = 256 << 10 // rendezvous
	}
	return pattern(n, byte(g*7+i))
}

func (a *amTally) handle(m *ucp.AMMessage) {
	if len(m.Header) != 8 {
		a.fail(fmt.Errorf("header of %d bytes", len(m.Header)))
		return
	}
	g, i := int(binary.LittleEndian.Uint32(m.Header)), int(binary.LittleEndian.Uint32(m.Header[4:]))
	want := amPayload(g, i)
	buf := make([]byte, m.Len())
	req, err := m.ReceiveInto(buf)
	if err != nil {
		a.fail(err)
		return
	}
	check := func() {
		if err := req.Wait(context.Background()); err != nil {
			a.fail(fmt.Errorf("message %d of goroutine %d: receive: %w", i, g, err))
		} else if !bytes.Equal(buf, want) {
			a.fail(fmt.Errorf("message %d of goroutine %d: %d bytes differ from the %d sent", i, g, len(buf), len(want)))
		}
		a.received.Add(1)
	}
	if m.IsRendezvous() {
		go check() // handlers must not block: the data arrives while the server progresses
	} else {
		check()
	}
}

func concurrentMixedOps(t *testing.T, tls string, peerErr bool, ops int) {
	ctx := newContext(t, ucp.WithConfig("TLS", tls))
	client, err := ctx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })

	const slot = 64 << 10
	const goroutines = 16
	type server struct {
		w      *ucp.Worker
		target *ucp.Mem
		tally  *amTally
	}
	var servers [2]server
	for s := range servers {
		w, err := ctx.NewWorker()
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		tally := &amTally{}
		require.NoError(t, w.SetAMHandler(amConcurrent, tally.handle))
		target, err := ctx.Allocate(goroutines * slot)
		require.NoError(t, err)
		t.Cleanup(func() { target.Close() })
		servers[s] = server{w, target, tally}
		runWorker(t, w)
		// A second goroutine progresses the server while Run does.
		t.Cleanup(repeat(func() { w.Progress(); runtime.Gosched() }))
	}

	type link struct {
		ep   *ucp.Endpoint
		rkey *ucp.RemoteKey
		srv  *server
	}
	var links [4]link
	for i := range links {
		srv := &servers[i%2]
		addr, err := srv.w.PackAddress()
		require.NoError(t, err)
		ep, err := client.ConnectWorker(addr, ucp.WithPeerErrorHandling(peerErr))
		require.NoError(t, err)
		t.Cleanup(func() { closeEP(t, ep) })
		links[i] = link{ep, unpackOn(t, ep, srv.target), srv}
	}
	local, err := ctx.Allocate(goroutines * slot)
	require.NoError(t, err)
	t.Cleanup(func() { local.Close() })
	lb, err := local.Bytes()
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Helpers: two goroutines progress the client, two sleep in its Wait.
	var helpers sync.WaitGroup
	stopHelpers := make(chan struct{})
	for h := range 4 {
		helpers.Add(1)
		go func() {
			defer helpers.Done()
			for {
				select {
				case <-stopHelpers:
					return
				default:
				}
				if h < 2 {
					client.Progress()
					runtime.Gosched()
				} else {
					c, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
					client.Wait(c)
					cancel()
				}
			}
		}()
	}

	var sent [2]atomic.Int64
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := links[g%len(links)]
			raddr := l.srv.target.Address() + uint64(g*slot)
			mine := lb[g*slot : (g+1)*slot]
			// complete waits for req with Wait, or by polling Test.
			complete := func(req ucp.Request, poll bool) error {
				if !poll {
					return req.Wait(wctx)
				}
				for {
					done, err := req.Test()
					if done {
						return err
					}
					if wctx.Err() != nil {
						req.Detach()
						return wctx.Err()
					}
					runtime.Gosched()
				}
			}
			step := func(i int) error {
				n := 8 + (g*13+i*29)%(slot/2)
				poll := (g+i)%3 == 0
				// Put from a slice, read it back into a slice.
				src := pattern(n, byte(g+i))
				req, err := putAt(src, raddr, l.rkey)
				if err != nil {
					return err
				}
				if err := complete(req, poll); err != nil {
					return fmt.Errorf("put: %w", err)
				}
				dst := make([]byte, n)
				if req, err = getAt(dst, raddr, l.rkey); err != nil {
					return err
				}
				if err := complete(req, !poll); err != nil {
					return fmt.Errorf("get: %w", err)
				}
				if !bytes.Equal(src, dst) {
					return fmt.Errorf("get of %d bytes read back other data than the put wrote", n)
				}
				// Put from mapped memory at the second half of the slot, then
				// flush the endpoint (or, sometimes, the whole worker).
				copy(mine[slot/2:], pattern(n, byte(g^i)))
				if req, err = putMemAt(local.Range(g*slot+slot/2, n), raddr+slot/2, l.rkey); err != nil {
					return err
				}
				if err := complete(req, poll); err != nil {
					return fmt.Errorf("put from mapped memory: %w", err)
				}
				if i%7 == 0 {
					err = client.Flush(wctx)
				} else {
					err = l.ep.Flush(wctx)
				}
				if err != nil {
					return fmt.Errorf("flush: %w", err)
				}
				clear(mine[:n])
				if req, err = getMemAt(local.Range(g*slot, n), raddr+slot/2, l.rkey); err != nil {
					return err
				}
				if err := complete(req, !poll); err != nil {
					return fmt.Errorf("get into mapped memory: %w", err)
				}
				if !bytes.Equal(mine[:n], pattern(n, byte(g^i))) {
					return fmt.Errorf("get into mapped memory of %d bytes read other data", n)
				}
				// An active message the server verifies.
				hdr := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(g)), uint32(i))
				if req, err = l.ep.SendAM(amConcurrent, hdr, amPayload(g, i), 0); err != nil {
					return err
				}
				if err := complete(req, poll); err != nil {
					return fmt.Errorf("active message: %w", err)
				}
				sent[(g%len(links))%2].Add(1)
				return nil
			}
			for i := range ops {
				if err := step(i); err != nil {
					errs <- fmt.Errorf("goroutine %d op %d: %w", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stopHelpers)
	helpers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Every message arrives and verifies.
	for s := range servers {
		deadline := time.Now().Add(time.Minute)
		for servers[s].tally.received.Load() < sent[s].Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		assert.Equal(t, sent[s].Load(), servers[s].tally.received.Load(), "server %d: messages received", s)
		servers[s].tally.mu.Lock()
		for _, err := range servers[s].tally.errs {
			t.Errorf("server %d: %v", s, err)
		}
		servers[s].tally.mu.Unlock()
	}
	// The last put of each goroutine is in the server's memory.
	for g := range goroutines {
		tb, err := links[g%len(links)].srv.target.Bytes()
		require.NoError(t, err)
		i := ops - 1
		n := 8 + (g*13+i*29)%(slot/2)
		assert.True(t, bytes.Equal(pattern(n, byte(g+i)), tb[g*slot:g*slot+n]), "goroutine %d: last put", g)
		assert.True(t, bytes.Equal(pattern(n, byte(g^i)), tb[g*slot+slot/2:g*slot+slot/2+n]), "goroutine %d: last put from mapped memory", g)
	}
}
