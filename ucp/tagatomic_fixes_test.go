package ucp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// TestEmptyStreamSendRefused: an empty stream message aborts the peer's
// UCX when it arrives before a receive (stream_recv.c:501, 1.16 to 1.23):
// the binding never sends one.
func TestEmptyStreamSendRefused(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)), viaListener(), runServer())
	_, err := p.ep.SendStream(nil)
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.ErrorContains(t, err, "at least one byte")
	m := p.allocate(t, 64)
	_, err = p.ep.SendStreamMem(m.Range(0, 0))
	require.ErrorIs(t, err, ucs.ErrInvalidParam)
}

// TestCloseMappingWhileReceiveWaits: a mapping a receive waits to fill
// closes at once (it is unmapped once the receive is done), and the
// receive still takes its message.
func TestCloseMappingWhileReceiveWaits(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)), viaListener(), runServer())
	for _, kind := range []string{"tag", "stream"} {
		dst, err := p.ctx.Allocate(128)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			var err error
			if kind == "tag" {
				_, err = p.client.RecvTagMem(waitCtx(t), dst.Range(0, 100), 3, ^ucp.Tag(0))
			} else {
				_, err = p.ep.RecvStreamMem(waitCtx(t), dst.Range(0, 100), ucp.StreamWaitAll)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond) // the receive waits
		closed := make(chan error, 1)
		go func() { closed <- dst.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Mem.Close waited for the receive", kind)
		}
		var send ucp.Request
		if kind == "tag" {
			send, err = p.sep.SendTag(3, make([]byte, 100))
		} else {
			send, err = p.sep.SendStream(make([]byte, 100))
		}
		require.NoError(t, err)
		require.NoError(t, send.Wait(waitCtx(t)))
		require.NoError(t, <-got, kind)
	}
}

// TestRecvStreamEndsWithItsWorker: closing the worker ends a waiting
// stream receive, as it ends a tag receive.
func TestRecvStreamEndsWithItsWorker(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)), viaListener())
	ended := make(chan error, 1)
	go func() {
		_, err := p.ep.RecvStream(waitCtx(t), make([]byte, 8), ucp.StreamWaitAll)
		ended <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, p.client.Close())
	select { // its ctx (waitCtx) is far longer: ErrClosed says the close ended it
	case err := <-ended:
		assert.ErrorIs(t, err, ucs.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("HANG: a stream receive outlived its worker's Close")
	}
}

// TestMappingOfAnotherContextRefused: a mapping's memory handle is its
// context's; a worker of another context refuses it, whatever the call.
func TestMappingOfAnotherContextRefused(t *testing.T) {
	p := newPair(t, onTLS("tcp"), withContext(ucp.WithFeatures(tagFeatures)), withPeerErr(false), connectBack(), runServer())
	other, err := ucp.NewContext(ucp.WithConfig("TLS", "tcp"))
	require.NoError(t, err)
	defer other.Close()
	foreign, err := other.Allocate(64)
	require.NoError(t, err)
	defer foreign.Close()
	_, r := p.mapRegion(t, 64)
	for what, call := range map[string]func() error{
		"PutMem":     func() error { _, err := r.PutMem(foreign.Range(0, 8), 0); return err },
		"GetMem":     func() error { _, err := r.GetMem(foreign.Range(0, 8), 0); return err },
		"SendAMMem":  func() error { _, err := p.ep.SendAMMem(1, nil, foreign.Range(0, 8), 0); return err },
		"SendTagMem": func() error { _, err := p.ep.SendTagMem(1, foreign.Range(0, 8)); return err },
		"RecvTagMem": func() error {
			_, err := p.client.RecvTagMem(context.Background(), foreign.Range(0, 8), 1, 1)
			return err
		},
		"SendStream": func() error { _, err := p.ep.SendStreamMem(foreign.Range(0, 8)); return err },
		"RecvStream": func() error { _, err := p.ep.RecvStreamMem(context.Background(), foreign.Range(0, 8), 0); return err },
	} {
		err := call()
		assert.ErrorIs(t, err, ucs.ErrInvalidParam, what)
		assert.ErrorContains(t, err, "another Context", what)
	}
}

// TestListenerNeedsAMOn117: UCX 1.17.0 aborted the process in the wire-up
// of a listener connection whose context lacks FeatureAM (ucp_worker.c:728,
// 3 of 3 runs); there Listen and Connect refuse such a context, saying so,
// and elsewhere they serve it.
func TestListenerNeedsAMOn117(t *testing.T) {
	ctx := newContext(t, ucp.WithFeatures(ucp.FeatureRMA))
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	defer w.Close()
	l, err := w.Listen("127.0.0.1:0")
	if ucs.LoadedVersion().Minor != 17 {
		require.NoError(t, err)
		require.NoError(t, l.Close())
		return
	}
	require.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.ErrorContains(t, err, "FeatureAM")
	_, err = w.Connect(context.Background(), "127.0.0.1:1")
	require.ErrorIs(t, err, ucs.ErrUnsupported)
}
