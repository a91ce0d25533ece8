package ucp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

const amJobs ucp.AMID = 7

// A service that waits for work pulls messages from a queue with a ctx,
// eager and rendezvous alike, in the order they were sent.
func TestAMQueueReceive(t *testing.T) {
	p := newPair(t, onTLS("tcp"), viaListener(), runClient())
	q, err := p.server.OpenAMQueue(amJobs)
	require.NoError(t, err)
	defer q.Close()
	_, err = p.server.OpenAMQueue(amJobs)
	require.ErrorIs(t, err, ucs.ErrAlreadyExists, "one queue or handler per id")

	sizes := []int{0, 16, 4096, 1 << 20}
	for i, n := range sizes {
		req, err := p.ep.SendAM(amJobs, []byte{byte(i)}, bytes.Repeat([]byte{byte(i + 1)}, n), 0)
		require.NoError(t, err)
		req.Detach()
	}
	for i, n := range sizes {
		m, err := q.Receive(waitCtx(t))
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, m.Header, "in order")
		require.Equal(t, n, m.Len())
		buf := make([]byte, n)
		req, err := m.ReceiveInto(buf)
		require.NoError(t, err)
		require.NoError(t, req.Wait(waitCtx(t)))
		assert.Equal(t, bytes.Repeat([]byte{byte(i + 1)}, n), buf, "message %d (rendezvous %t)", i, m.IsRendezvous())
	}

	// Nothing queued: Receive ends with its ctx and names the call.
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = q.Receive(short)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.Contains(t, err.Error(), "receive active message 7")
}

// Close wakes a Receive that waits, which then says the queue is closed;
// a rendezvous message nobody received is dropped, not leaked.
func TestAMQueueCloseWakesReceive(t *testing.T) {
	p := newPair(t, onTLS("tcp"), viaListener(), runClient())
	runWorker(t, p.client)
	q, err := p.server.OpenAMQueue(amJobs)
	require.NoError(t, err)
	// The server's worker goes on being progressed, as a service's is: the
	// dropped rendezvous data is released to the sender by its progress.
	runWorker(t, p.server)

	req, err := p.ep.SendAM(amJobs, nil, make([]byte, 1<<20), ucp.AMRndv)
	require.NoError(t, err)
	m, err := q.Receive(waitCtx(t))
	require.NoError(t, err)
	assert.True(t, m.IsRendezvous())
	m.Drop()
	require.NoError(t, req.Wait(waitCtx(t)))

	got := make(chan error, 1)
	go func() {
		_, err := q.Receive(context.Background())
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	require.NoError(t, q.Close())
	select {
	case err := <-got:
		require.ErrorIs(t, err, ucs.ErrClosed)
		t.Logf("Receive woke %v after Close", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake Receive")
	}
	require.NoError(t, q.Close(), "twice is fine")
}

// An id routed to an open queue belongs to it: SetAMHandler and
// ClearAMHandler refuse it (SetAMHandler replaced the queue's routing
// silently, and the queue's Close then cleared the newcomer's handler),
// and after the queue's Close the id is free.
func TestAMQueueOwnsItsID(t *testing.T) {
	ctx := newContext(t)
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	defer w.Close()
	q, err := w.OpenAMQueue(amJobs)
	require.NoError(t, err)
	err = w.SetAMHandler(amJobs, func(*ucp.AMMessage) {})
	require.ErrorIs(t, err, ucs.ErrAlreadyExists)
	assert.Contains(t, err.Error(), "id 7 already has a queue")
	require.ErrorIs(t, w.ClearAMHandler(amJobs), ucs.ErrAlreadyExists)
	require.NoError(t, q.Close())

	require.NoError(t, w.SetAMHandler(amJobs, func(*ucp.AMMessage) {}))
	_, err = w.OpenAMQueue(amJobs)
	require.ErrorIs(t, err, ucs.ErrAlreadyExists, "a handler's id")
	require.NoError(t, q.Close(), "a second Close leaves the id's new handler alone")
	require.NoError(t, w.SetAMHandler(amJobs, func(*ucp.AMMessage) {}), "the handler is still there to replace")
	require.NoError(t, w.ClearAMHandler(amJobs))
	q2, err := w.OpenAMQueue(amJobs)
	require.NoError(t, err)
	require.NoError(t, q2.Close())
}

// Rendezvous messages left in a queue nobody closes, and one received but
// not taken, are dropped by the worker's Close: the worker and its context
// are released (they stayed for good), the kept message's ReceiveInto
// says the worker is closed, and so does the queue's Receive (it handed
// out the queued messages).
func TestWorkerCloseDropsQueuedRendezvous(t *testing.T) {
	base := settleHandles()
	func() {
		// Closed when this function returns, not when the test ends.
		var p pair
		defer p.close()
		require.NoError(t, p.build(waitCtx(t), pairConfig{tls: "tcp", runClient: true}))
		server, ep := p.server, p.ep

		q, err := server.OpenAMQueue(amJobs)
		require.NoError(t, err)
		for range 3 {
			req, err := ep.SendAM(amJobs, nil, make([]byte, 1<<20), ucp.AMRndv)
			require.NoError(t, err)
			req.Detach()
		}
		kept, err := q.Receive(waitCtx(t))
		require.NoError(t, err)
		require.True(t, kept.IsRendezvous())
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			_, err := server.Progress() // the others arrive in the queue
			require.NoError(t, err)
		}
		require.NoError(t, server.Close()) // the queue is never closed
		_, err = kept.ReceiveInto(make([]byte, kept.Len()))
		require.ErrorIs(t, err, ucs.ErrClosed)
		_, err = q.Receive(waitCtx(t))
		require.ErrorIs(t, err, ucs.ErrClosed, "messages still queued are not handed out after the worker's Close")
	}()
	deadline := time.Now().Add(20 * time.Second)
	for settleHandles() != base && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, base, ucs.LiveHandles(), "every UCX object released")
}

// A handler that keeps its messages, as Go code keeps what it is given:
// each kept message still has its own header and data after the handler
// returned (the struct was a reused slot that the next message wrote
// over, a data race), eager data can still be received, and rendezvous
// data not received in the handler is an error to receive later. Small
// messages and larger ones are copied differently; appending to a kept
// header never writes into its data.
func TestAMHandlerKeepsMessages(t *testing.T) {
	p := newPair(t, onTLS("tcp"), viaListener(), runClient())
	runWorker(t, p.client)
	var mu sync.Mutex
	var kept []*ucp.AMMessage
	require.NoError(t, p.server.SetAMHandler(amJobs, func(m *ucp.AMMessage) {
		mu.Lock()
		kept = append(kept, m)
		mu.Unlock()
	}))
	const n = 16
	for i := range n {
		flags := ucp.AMSendFlags(0)
		size := keptSize(i)
		if i == n-1 {
			flags, size = ucp.AMRndv, 1<<20
		}
		req, err := p.ep.SendAM(amJobs, []byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, size), flags)
		require.NoError(t, err)
		req.Detach()
	}
	for ctx := waitCtx(t); ; {
		mu.Lock()
		got := len(kept)
		mu.Unlock()
		if got == n {
			break
		}
		require.NoError(t, ctx.Err(), "%d of %d messages", got, n)
		_, err := p.server.Progress()
		require.NoError(t, err)
	}
	for i, m := range kept {
		require.Equal(t, []byte{byte(i)}, m.Header, "message %d", i)
		grown := append(m.Header, 0xee, 0xee)
		assert.Equal(t, []byte{byte(i), 0xee, 0xee}, grown)
		if !m.IsRendezvous() {
			assert.Equal(t, bytes.Repeat([]byte{byte(i)}, keptSize(i)), m.Data, "message %d after its header grew", i)
		}
		buf := make([]byte, m.Len())
		req, err := m.ReceiveInto(buf)
		if m.IsRendezvous() {
			require.ErrorIs(t, err, ucs.ErrInvalidParam, "rendezvous data is dropped when the handler returns")
			continue
		}
		require.NoError(t, err)
		require.NoError(t, req.Wait(waitCtx(t)))
		assert.Equal(t, bytes.Repeat([]byte{byte(i)}, keptSize(i)), buf, "message %d", i)
	}
}

// keptSize is the data size of TestAMHandlerKeepsMessages' eager message i:
// alternately small and over a hundred bytes.
func keptSize(i int) int { return 32 + i%2*100 }

// TestAMOrderWithSeveralProgressors: the receiving worker is progressed by
// Run and by another goroutine at once (a Receive, a Wait, a Progress
// loop: what a service does). Handlers still run one at a time, in the
// order the messages were sent, and a queue hands them out in that order.
// Two goroutines used to run their own batches' handlers concurrently: an
// AMQueue got 1 MiB and 3 MiB messages swapped (10 of 60 runs), and 2,000
// handler calls overlapped ~1,980 times with ~720 inversions.
func TestAMOrderWithSeveralProgressors(t *testing.T) {
	for _, tls := range []string{"posix,sysv,self", "tcp"} {
		t.Run(tls, func(t *testing.T) {
			p := newPair(t, onTLS(tls), withPeerErr(tls == "tcp"), runServer()) // the server runs Run
			server, ep := p.server, p.ep

			const handled, queued ucp.AMID = 5, 6
			var (
				mu      sync.Mutex
				seen    []uint32
				inside  int
				overlap int
			)
			require.NoError(t, server.SetAMHandler(handled, func(m *ucp.AMMessage) {
				mu.Lock()
				inside++
				if inside > 1 {
					overlap++
				}
				seen = append(seen, binary.LittleEndian.Uint32(m.Header))
				mu.Unlock()
				time.Sleep(10 * time.Microsecond) // long enough for another batch to come
				mu.Lock()
				inside--
				mu.Unlock()
			}))
			q, err := server.OpenAMQueue(queued)
			require.NoError(t, err)
			defer q.Close()
			defer repeat(func() { server.Progress() })() // the second progressor

			send := func(id ucp.AMID, i uint32, data []byte) {
				req, err := ep.SendAM(id, binary.LittleEndian.AppendUint32(nil, i), data, 0)
				require.NoError(t, err)
				require.NoError(t, req.Wait(waitCtx(t)))
			}
			const n = 1000
			for i := range uint32(n) {
				send(handled, i, nil)
			}
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n }, 20*time.Second, time.Millisecond)
			mu.Lock()
			for i, v := range seen {
				require.Equal(t, uint32(i), v, "handler call %d", i)
			}
			assert.Zero(t, overlap, "handler calls that overlapped")
			mu.Unlock()

			// A rendezvous send completes once the receiver takes or drops
			// its data: the receiver runs beside the sender.
			sizes := []int{0, 1, 100, 8 << 10, 1 << 20, 3 << 20, 16}
			for round := range 5 {
				received := make(chan error, 1)
				go func() {
					for i, size := range sizes {
						m, err := q.Receive(waitCtx(t))
						if err == nil && (binary.LittleEndian.Uint32(m.Header) != uint32(i) || m.Len() != size) {
							err = fmt.Errorf("round %d: message %d of %d bytes came as message %d of %d bytes", round, i, size, binary.LittleEndian.Uint32(m.Header), m.Len())
						}
						if err != nil {
							received <- err
							return
						}
						m.Drop()
					}
					received <- nil
				}()
				for i, size := range sizes {
					send(queued, uint32(i), bytes.Repeat([]byte{byte(i)}, size))
				}
				require.NoError(t, <-received)
			}
		})
	}
}
