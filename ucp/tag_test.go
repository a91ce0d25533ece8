package ucp_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

const tagFeatures = ucp.FeatureRMA | ucp.FeatureAM | ucp.FeatureTag | ucp.FeatureStream

// TestNewcomerTags: a host and a DPU, each with its own context, exchange
// tagged messages in the order a newcomer writes it: Listen, Connect,
// post a receive, send, Wait for both, read Length and Tag.
func TestNewcomerTags(t *testing.T) {
	opts := []ucp.ContextOption{ucp.WithFeatures(tagFeatures), ucp.WithConfig("TLS", "tcp")}
	hostCtx, err := ucp.NewContext(opts...)
	require.NoError(t, err)
	defer hostCtx.Close()
	host, err := hostCtx.NewWorker()
	require.NoError(t, err)
	defer host.Close()
	l, err := host.Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	dpuCtx, err := ucp.NewContext(opts...)
	require.NoError(t, err)
	defer dpuCtx.Close()
	dpu, err := dpuCtx.NewWorker()
	require.NoError(t, err)
	defer dpu.Close()

	accepted := acceptOne(t, host, l)
	ep, err := dpu.Connect(waitCtx(t), l.Addr().String())
	require.NoError(t, err)
	defer ep.Close(waitCtx(t), ucp.CloseForce)
	hep := accepted()
	defer hep.Close(waitCtx(t), ucp.CloseForce)
	runWorker(t, host)

	send, err := ep.SendTag(0x1234, []byte("doorbell"))
	require.NoError(t, err)
	copied := send
	require.NoError(t, send.Wait(waitCtx(t)))
	require.NoError(t, copied.Wait(waitCtx(t)), "a copy is the same operation")
	buf := make([]byte, 64)
	info, err := host.RecvTag(waitCtx(t), buf, 0x1200, 0xff00) // any tag 0x12xx
	require.NoError(t, err)
	assert.Equal(t, ucp.TagInfo{Tag: 0x1234, Len: 8}, info)
	assert.Equal(t, "doorbell", string(buf[:info.Len]))

	// And back, the DPU receiving on its own worker before the host sends.
	got := make(chan ucp.TagInfo, 1)
	back := make([]byte, 8)
	go func() {
		info, err := dpu.RecvTag(waitCtx(t), back, 7, ^ucp.Tag(0))
		assert.NoError(t, err)
		got <- info
	}()
	send, err = hep.SendTag(7, []byte("ack"))
	require.NoError(t, err)
	require.NoError(t, send.Wait(waitCtx(t)))
	info = <-got
	assert.Equal(t, "ack", string(back[:info.Len]))
}

// TestTagProbeCancelTruncate: a probe sees a message without taking it; a
// posted receive cancelled ends with ErrCanceled and leaves its buffer
// alone; a message larger than the receive's buffer fails it with
// ErrTruncated; a context without FeatureTag refuses.
func TestTagProbeCancelTruncate(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)), connectBack(), runServer())
	server := p.server

	// A receive whose ctx ends is cancelled: its buffer is the caller's
	// again, and the message sent later goes to the next receive.
	buf := make([]byte, 16)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.client.RecvTag(short, buf, 99, ^ucp.Tag(0))
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.ErrorContains(t, err, "cancelled")
	send, err := p.sep.SendTag(99, []byte("later"))
	require.NoError(t, err)
	other := make([]byte, 16)
	info, err := p.client.RecvTag(waitCtx(t), other, 99, ^ucp.Tag(0))
	require.NoError(t, err)
	require.NoError(t, send.Wait(waitCtx(t)))
	assert.Equal(t, "later", string(other[:info.Len]))
	assert.Equal(t, make([]byte, 16), buf, "the cancelled receive's buffer was not written")

	// Probe: the server's worker runs, so the message arrives there once
	// the client's send completed (the client is progressed by its Wait).
	send, err = p.ep.SendTag(5, []byte("probe me"))
	require.NoError(t, err)
	require.NoError(t, send.Wait(waitCtx(t)))
	require.Eventually(t, func() bool {
		var ok bool
		info, ok, err = server.ProbeTag(5, ^ucp.Tag(0))
		require.NoError(t, err)
		return ok
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, ucp.TagInfo{Tag: 5, Len: 8}, info)
	got := make([]byte, 8)
	_, err = server.RecvTag(waitCtx(t), got, 5, ^ucp.Tag(0))
	require.NoError(t, err)
	assert.Equal(t, "probe me", string(got))
	_, ok, err := server.ProbeTag(5, ^ucp.Tag(0))
	require.NoError(t, err)
	assert.False(t, ok, "taken by the receive")

	// Truncated: 100 bytes into 10.
	send, err = p.ep.SendTag(6, bytes.Repeat([]byte{1}, 100))
	require.NoError(t, err)
	require.NoError(t, send.Wait(waitCtx(t)))
	_, err = server.RecvTag(waitCtx(t), make([]byte, 10), 6, ^ucp.Tag(0))
	assert.ErrorIs(t, err, ucs.ErrTruncated)

	// Zero-length messages and buffers.
	send, err = p.ep.SendTag(8, nil)
	require.NoError(t, err)
	require.NoError(t, send.Wait(waitCtx(t)))
	info, err = server.RecvTag(waitCtx(t), nil, 8, ^ucp.Tag(0))
	require.NoError(t, err)
	assert.Equal(t, ucp.TagInfo{Tag: 8}, info)

	q := newPair(t, onTLS("tcp"), runServer()) // RMA and AM only
	_, err = q.ep.SendTag(1, []byte("x"))
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "FeatureTag")
	_, err = q.server.RecvTag(waitCtx(t), make([]byte, 1), 1, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	_, _, err = q.server.ProbeTag(1, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
}

// TestTagsAfterClose: a receive waiting when its worker is closed ends
// with the close, and every call on a closed worker or endpoint says so.
func TestTagsAfterClose(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)))
	ended := make(chan error, 1)
	go func() {
		_, err := p.server.RecvTag(waitCtx(t), make([]byte, 8), 1, ^ucp.Tag(0))
		ended <- err
	}()
	time.Sleep(50 * time.Millisecond) // the receive is waiting
	closeEP(t, p.ep)
	_, err := p.ep.SendTag(1, []byte("x"))
	assert.ErrorIs(t, err, ucs.ErrClosed)
	require.NoError(t, p.server.Close())
	select {
	case err := <-ended:
		assert.ErrorIs(t, err, ucs.ErrClosed)
		assert.ErrorContains(t, err, "cancelled")
	case <-time.After(10 * time.Second):
		t.Fatal("HANG: a receive outlived its worker's Close")
	}
	_, err = p.server.RecvTag(waitCtx(t), make([]byte, 8), 1, 1)
	assert.ErrorIs(t, err, ucs.ErrClosed)
	_, _, err = p.server.ProbeTag(1, 1)
	assert.ErrorIs(t, err, ucs.ErrClosed)
}

// TestNewcomerStream: bytes in order without boundaries: three sends, one
// receive that waits for all of them, then partial receives.
func TestNewcomerStream(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)), viaListener(), runServer())
	want := make([]byte, 64<<10)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for _, part := range [][]byte{want[:1], want[1 : 32<<10], want[32<<10:]} {
		req, err := p.ep.SendStream(part)
		require.NoError(t, err)
		req.Detach() // its worker completes it
	}
	got := make([]byte, len(want))
	n, err := p.sep.RecvStream(waitCtx(t), got, ucp.StreamWaitAll)
	require.NoError(t, err)
	assert.Equal(t, len(want), n)
	assert.True(t, bytes.Equal(want, got))

	// Partial: whatever has come, at least a byte.
	req, err := p.ep.SendStream([]byte("hello"))
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	var all []byte
	for len(all) < 5 {
		b := make([]byte, 16)
		n, err := p.sep.RecvStream(waitCtx(t), b, 0)
		require.NoError(t, err)
		require.Positive(t, n)
		all = append(all, b[:n]...)
	}
	assert.Equal(t, "hello", string(all))

	_, err = p.sep.RecvStream(waitCtx(t), nil, 0)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam)

	// A receive whose ctx ends stays posted, and says so: the next bytes
	// land in its buffer, not in a later receive's.
	pending := make([]byte, 4)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = p.sep.RecvStream(short, pending, ucp.StreamWaitAll)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.ErrorContains(t, err, "stays posted")
	req, err = p.ep.SendStream([]byte("late"))
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	assert.Eventually(t, func() bool { return string(pending) == "late" }, 10*time.Second, time.Millisecond)
	q := newPair(t, onTLS("tcp"), runServer())
	_, err = q.ep.SendStream([]byte("x"))
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "FeatureStream")
}
