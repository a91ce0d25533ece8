package ucp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// TestShortSendsOutpaceThePeer: a short tagged or active-message send of
// Go bytes goes to UCX unpinned, to be completed within the call, and is
// pinned and sent again when UCX refuses (streams are always pinned). The
// client sends tagged messages, of lengths on both sides of the unpinned
// limit, while the server does not progress, until UCX's queue to it is
// full and refuses some; then stream chunks and active messages. Every
// buffer whose send completed at once is overwritten at once (the
// caller's again: UCX must have copied it). Then the server takes
// everything, and each message must be what its buffer held when it was
// sent, in order. (A stream send offered unpinned, which UCX kept all the
// same, failed this test under -race: the collector reused its buffer.)
func TestShortSendsOutpaceThePeer(t *testing.T) {
	for _, tls := range []string{"posix,sysv,self,tcp", "tcp"} {
		t.Run(tls, func(t *testing.T) {
			p := newPair(t, onTLS(tls), withContext(ucp.WithFeatures(tagFeatures)), viaListener())
			lengths := []int{1, 8, 100, 1000, 1024, 1025, 4096}
			const rounds = 60
			var sends []ucp.Request
			var want [][]byte
			atOnce, refused := 0, 0 // short sends completed within the call, and not
			send := func(do func(b []byte) (ucp.Request, error), b []byte) {
				want = append(want, bytes.Clone(b))
				req, err := do(b)
				require.NoError(t, err)
				switch {
				case req.Done():
					atOnce++
					for i := range b {
						b[i] = 0xee // the caller's again
					}
				case len(b) <= 1024:
					refused++
				}
				sends = append(sends, req)
			}
			// Tagged messages until UCX has kept some short ones (its queue
			// to the peer full), and then as many again.
			for r := 0; refused < 20 && r < 20000; r++ {
				for _, n := range lengths {
					b := bytes.Repeat([]byte{byte(r*len(lengths) + n)}, n)
					copy(b, fmt.Sprintf("%d/%d", r, n))
					send(func(b []byte) (ucp.Request, error) { return p.ep.SendTag(ucp.Tag(n), b) }, b)
				}
			}
			tags := len(want)
			for r := range rounds {
				b := bytes.Repeat([]byte{byte(r)}, 8+r)
				send(p.ep.SendStream, b)
			}
			streams := len(want)
			q, err := p.server.OpenAMQueue(9)
			require.NoError(t, err)
			defer q.Close()
			for r := range rounds {
				b := bytes.Repeat([]byte{byte(r)}, 16*r+1)
				send(func(b []byte) (ucp.Request, error) { return p.ep.SendAM(9, nil, b, 0) }, b)
			}
			// Both ways were taken: the queue filled.
			require.Positive(t, atOnce, "short sends completed within the call")
			require.Positive(t, refused, "short sends UCX kept (pinned)")
			runWorker(t, p.server)
			for _, req := range sends {
				require.NoError(t, req.Wait(waitCtx(t)))
			}

			buf := make([]byte, 8192)
			for i := 0; i < tags; i++ {
				n := len(want[i])
				info, err := p.server.RecvTag(waitCtx(t), buf, ucp.Tag(n), ^ucp.Tag(0))
				require.NoError(t, err)
				require.Equal(t, want[i], buf[:info.Len], "tagged message %d", i)
			}
			var stream []byte
			for _, b := range want[tags:streams] {
				stream = append(stream, b...)
			}
			got := make([]byte, len(stream))
			_, err = p.sep.RecvStream(waitCtx(t), got, ucp.StreamWaitAll)
			require.NoError(t, err)
			require.Equal(t, stream, got, "the stream")
			for i, b := range want[streams:] {
				m, err := q.Receive(waitCtx(t))
				require.NoError(t, err)
				data := make([]byte, m.Len())
				req, err := m.ReceiveInto(data)
				require.NoError(t, err)
				require.NoError(t, req.Wait(waitCtx(t)))
				require.Equal(t, b, data, "active message %d", i)
			}
		})
	}
}

// TestShortReceivesLand: a tag receive into a buffer of up to 1 KiB lands
// in the worker's memory and is copied out; a longer one is pinned. Four
// goroutines receive messages of every length from 1 to 1100 bytes, each
// into a buffer longer than the message and filled with a sentinel, while
// the peer sends them: each message arrives whole, and the bytes past its
// length keep the sentinel. Receives whose ctx ends before their message
// is sent are interleaved: their slabs go back, and their buffers are not
// written.
func TestShortReceivesLand(t *testing.T) {
	p := newPair(t, onTLS("posix,sysv,self,tcp"), withContext(ucp.WithFeatures(tagFeatures)), viaListener(), runServer())
	const goroutines, top = 4, 1100
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			errs <- func() error {
				for n := 1 + g; n <= top; n += goroutines {
					buf := bytes.Repeat([]byte{0xa5}, n+1+n%7)
					if n%50 == 0 {
						// Nothing has this tag: the receive is cancelled.
						ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
						_, err := p.client.RecvTag(ctx, buf, ucp.Tag(1<<40|n), ^ucp.Tag(0))
						cancel()
						if !errors.Is(err, ucs.ErrTimedOut) {
							return fmt.Errorf("receive with no message: %v", err)
						}
						if !bytes.Equal(buf, bytes.Repeat([]byte{0xa5}, len(buf))) {
							return fmt.Errorf("a cancelled receive wrote its buffer")
						}
					}
					info, err := p.client.RecvTag(waitCtx(t), buf, ucp.Tag(n), ^ucp.Tag(0))
					if err != nil {
						return err
					}
					want := bytes.Repeat([]byte{byte(n)}, n)
					if info.Len != n || !bytes.Equal(buf[:n], want) {
						return fmt.Errorf("message %d: got %d bytes %x", n, info.Len, buf[:min(info.Len, 16)])
					}
					if !bytes.Equal(buf[n:], bytes.Repeat([]byte{0xa5}, len(buf)-n)) {
						return fmt.Errorf("message %d: the bytes past it were written", n)
					}
				}
				return nil
			}()
		}()
	}
	for n := 1; n <= top; n++ {
		req, err := p.sep.SendTag(ucp.Tag(n), bytes.Repeat([]byte{byte(n)}, n))
		require.NoError(t, err)
		require.NoError(t, req.Wait(waitCtx(t)))
	}
	for range goroutines {
		require.NoError(t, <-errs)
	}
}
