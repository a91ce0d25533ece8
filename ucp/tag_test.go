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

	buf := make([]byte, 64)
	recv, err := host.RecvTag(buf, 0x1200, 0xff00) // any tag 0x12xx
	require.NoError(t, err)
	send, err := ep.SendTag(0x1234, []byte("doorbell"))
	require.NoError(t, err)
	copied := send
	require.NoError(t, send.Wait(waitCtx(t)))
	require.NoError(t, copied.Wait(waitCtx(t)), "a copy is the same operation")
	require.NoError(t, recv.Wait(waitCtx(t)))
	assert.Equal(t, 8, recv.Length())
	assert.Equal(t, ucp.Tag(0x1234), recv.Tag())
	assert.Equal(t, "doorbell", string(buf[:recv.Length()]))

	// And back, the DPU receiving on its own worker.
	back := make([]byte, 8)
	recv, err = dpu.RecvTag(back, 7, ^ucp.Tag(0))
	require.NoError(t, err)
	send, err = hep.SendTag(7, []byte("ack"))
	require.NoError(t, err)
	require.NoError(t, recv.Wait(waitCtx(t)))
	require.NoError(t, send.Wait(waitCtx(t)))
	assert.Equal(t, "ack", string(back[:recv.Length()]))
}

// TestTagProbeCancelTruncate: a probe sees a message without taking it; a
// posted receive cancelled ends with ErrCanceled and leaves its buffer
// alone; a message larger than the receive's buffer fails it with
// ErrTruncated; a context without FeatureTag refuses.
func TestTagProbeCancelTruncate(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)), runServer())
	server := p.server

	// Cancel first: a posted receive nobody sends to.
	buf := make([]byte, 16)
	recv, err := p.client.RecvTag(buf, 99, ^ucp.Tag(0))
	require.NoError(t, err)
	recv.Cancel()
	err = recv.Wait(waitCtx(t))
	require.ErrorIs(t, err, ucs.ErrCanceled)
	recv.Cancel() // again: nothing

	// Probe: the server's worker runs, so the message arrives there once
	// the client's send completed (the client is progressed by its Wait).
	send, err := p.ep.SendTag(5, []byte("probe me"))
	require.NoError(t, err)
	require.NoError(t, send.Wait(waitCtx(t)))
	var info ucp.TagInfo
	require.Eventually(t, func() bool {
		var ok bool
		info, ok, err = server.ProbeTag(5, ^ucp.Tag(0))
		require.NoError(t, err)
		return ok
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, ucp.TagInfo{Tag: 5, Len: 8}, info)
	got := make([]byte, 8)
	recv, err = server.RecvTag(got, 5, ^ucp.Tag(0))
	require.NoError(t, err)
	require.NoError(t, recv.Wait(waitCtx(t)))
	assert.Equal(t, "probe me", string(got))
	_, ok, err := server.ProbeTag(5, ^ucp.Tag(0))
	require.NoError(t, err)
	assert.False(t, ok, "taken by the receive")

	// Truncated: 100 bytes into 10.
	small := make([]byte, 10)
	recv, err = server.RecvTag(small, 6, ^ucp.Tag(0))
	require.NoError(t, err)
	send, err = p.ep.SendTag(6, bytes.Repeat([]byte{1}, 100))
	require.NoError(t, err)
	assert.ErrorIs(t, recv.Wait(waitCtx(t)), ucs.ErrTruncated)
	send.Wait(waitCtx(t)) // the sender's outcome is UCX's business; it completes

	// Zero-length messages and buffers.
	recv, err = server.RecvTag(nil, 8, ^ucp.Tag(0))
	require.NoError(t, err)
	send, err = p.ep.SendTag(8, nil)
	require.NoError(t, err)
	require.NoError(t, send.Wait(waitCtx(t)))
	require.NoError(t, recv.Wait(waitCtx(t)))
	assert.Equal(t, 0, recv.Length())

	q := newPair(t, onTLS("tcp"), runServer()) // RMA and AM only
	_, err = q.ep.SendTag(1, []byte("x"))
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "FeatureTag")
	_, err = q.server.RecvTag(make([]byte, 1), 1, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	_, _, err = q.server.ProbeTag(1, 1)
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
}

// TestTagsAfterClose: every call on a closed worker or endpoint says so,
// and a receive posted when the worker closes ends.
func TestTagsAfterClose(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)))
	recv, err := p.server.RecvTag(make([]byte, 8), 1, ^ucp.Tag(0))
	require.NoError(t, err)
	closeEP(t, p.ep)
	_, err = p.ep.SendTag(1, []byte("x"))
	assert.ErrorIs(t, err, ucs.ErrClosed)
	recv.Cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	assert.ErrorIs(t, recv.Wait(ctx), ucs.ErrCanceled)
	require.NoError(t, p.server.Close())
	_, err = p.server.RecvTag(make([]byte, 8), 1, 1)
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
	recv, err := p.sep.RecvStream(got, ucp.StreamWaitAll)
	require.NoError(t, err)
	require.NoError(t, recv.Wait(waitCtx(t)))
	assert.Equal(t, len(want), recv.Length())
	assert.True(t, bytes.Equal(want, got))

	// Partial: whatever has come, at least a byte.
	req, err := p.ep.SendStream([]byte("hello"))
	require.NoError(t, err)
	require.NoError(t, req.Wait(waitCtx(t)))
	var all []byte
	for len(all) < 5 {
		b := make([]byte, 16)
		recv, err := p.sep.RecvStream(b, 0)
		require.NoError(t, err)
		require.NoError(t, recv.Wait(waitCtx(t)))
		require.Positive(t, recv.Length())
		all = append(all, b[:recv.Length()]...)
	}
	assert.Equal(t, "hello", string(all))

	_, err = p.sep.RecvStream(nil, 0)
	assert.ErrorIs(t, err, ucs.ErrInvalidParam)
	q := newPair(t, onTLS("tcp"), runServer())
	_, err = q.ep.SendStream([]byte("x"))
	assert.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "FeatureStream")
}
