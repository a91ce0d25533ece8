package share

import (
	"context"
	"net/netip"
	"sync"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// Peer is a third peer the offload calls move a region's bytes to and
// from (Region.CopyTo, CopyFrom, SendAM): the DPU's job. In rkey mode it
// is an endpoint of the session's data path, which alone holds UCX for
// the session, so the peer reaches that process, not this one; in export
// mode an endpoint of this process's worker, which holds the imported
// mappings the bytes leave from without a copy.
type Peer struct {
	imp *Importer
	id  uint64        // rkey mode: the data path's
	ep  *ucp.Endpoint // export mode

	mu     sync.Mutex
	closed bool
}

// ConnectPeer connects to a third peer's UCX listener at addr (ip:port)
// and returns once the connection is wired up. In rkey mode the session's
// data path connects, and lets the peer's host through its filter while
// the Peer is open.
func (imp *Importer) ConnectPeer(ctx context.Context, addr string) (*Peer, error) {
	const op = "share: connect peer"
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, &ucs.Error{Op: op, Err: ucs.ErrInvalidParam, Reason: "the address is not ip:port", Wrapped: err}
	}
	if err := imp.open(op); err != nil {
		return nil, err
	}
	if imp.dp == nil {
		if _, err := imp.ucx(); err != nil {
			return nil, err
		}
		ep, err := imp.w.Connect(ctx, addr)
		if err != nil {
			return nil, err
		}
		return imp.keepPeer(&Peer{imp: imp, ep: ep}), nil
	}
	mv := imp.dp.ConnectPeer(addr)
	if err := mv.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			// The data path goes on connecting: the peer it makes is closed.
			go func() {
				if mv.Wait(context.Background()) == nil {
					imp.dp.ClosePeer(mv.ID()).Wait(context.Background())
				}
			}()
			return nil, ctxError(op, ctx.Err())
		}
		return nil, wrapDP(op, err)
	}
	return imp.keepPeer(&Peer{imp: imp, id: mv.ID()}), nil
}

func (imp *Importer) keepPeer(p *Peer) *Peer {
	imp.mu.Lock()
	imp.peers = append(imp.peers, p)
	imp.mu.Unlock()
	return p
}

// open fails once the importer is closing.
func (imp *Importer) open(op string) error {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if imp.closing {
		return errs.New(op, ucs.ErrClosed, "the importer is closed")
	}
	return nil
}

// wrapDP is err from the session's data path, as this package's error.
func wrapDP(op string, err error) error {
	if ue, ok := err.(*ucs.Error); ok {
		return &ucs.Error{Op: op, Err: ue.Err, Reason: ue.Reason}
	}
	return &ucs.Error{Op: op, Err: ucs.ErrIOError, Wrapped: err}
}

// Close closes the connection to the peer (its regions with it); closing
// twice returns nil. The Importer's Close closes every Peer.
func (p *Peer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	imp := p.imp
	if p.ep != nil {
		ctx, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
		defer cancel()
		if err := p.ep.Close(ctx, ucp.CloseFlush); err != nil {
			p.ep.Close(ctx, ucp.CloseForce)
		}
		return nil
	}
	return imp.closeWait("share: close peer", imp.dp.ClosePeer(p.id))
}

// closeWait waits for a data-path request that closes something, for the
// handshake timeout; once the data path has ended, its end closed it too.
func (imp *Importer) closeWait(op string, mv *datapath.Move) error {
	ctx, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
	defer cancel()
	if err := mv.Wait(ctx); err != nil {
		select {
		case <-imp.dp.Done():
			return nil
		default:
		}
		return wrapDP(op, err)
	}
	return nil
}

func (p *Peer) usable(op string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errs.New(op, ucs.ErrClosed, "the peer is closed")
	}
	return nil
}

// PeerRegion is a region of a third peer's memory, as the peer packed it
// (ucp.Mem.PackRegion), for CopyTo and CopyFrom.
type PeerRegion struct {
	peer *Peer
	id   uint64           // rkey mode: the data path's
	rr   ucp.RemoteRegion // export mode
	n    int

	mu     sync.Mutex
	closed bool
}

// UnpackRegion unpacks a region the peer packed.
func (p *Peer) UnpackRegion(ctx context.Context, packed []byte) (*PeerRegion, error) {
	const op = "share: unpack peer region"
	if err := p.usable(op); err != nil {
		return nil, err
	}
	if p.ep != nil {
		rr, err := p.ep.UnpackRegion(ctx, packed)
		if err != nil {
			return nil, err
		}
		return &PeerRegion{peer: p, rr: rr, n: rr.Len()}, nil
	}
	mv := p.imp.dp.UnpackPeerRegion(p.id, packed)
	if err := mv.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			go func() {
				if mv.Wait(context.Background()) == nil {
					p.imp.dp.ClosePeerRegion(mv.ID()).Wait(context.Background())
				}
			}()
			return nil, ctxError(op, ctx.Err())
		}
		return nil, wrapDP(op, err)
	}
	return &PeerRegion{peer: p, id: mv.ID(), n: mv.Len()}, nil
}

// Len is the region's length in bytes.
func (r *PeerRegion) Len() int { return r.n }

// Close releases the region's key; closing twice returns nil.
func (r *PeerRegion) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	if r.id == 0 {
		return r.rr.Key().Close()
	}
	imp := r.peer.imp
	return imp.closeWait("share: close peer region", imp.dp.ClosePeerRegion(r.id))
}

func (r *PeerRegion) usable(op string, off, n int) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return errs.New(op, ucs.ErrClosed, "the peer region is closed")
	}
	if off < 0 || n < 0 || off > r.n || n > r.n-off {
		return errs.New(op, ucs.ErrOutOfRange, "%d bytes at offset %d are outside the peer's region (%d bytes)", n, off, r.n)
	}
	return r.peer.usable(op)
}

// AMID names an active message's handler: the id a third peer sends with
// and an AMQueue takes (UCX's, as ucp.AMID; an alias, so share's users need
// not import ucp).
type AMID = ucp.AMID

// AMQueue takes the active messages of one id that third peers send the
// session (in rkey mode, its data path), for Region.ReceiveAM. Open it
// before the peer sends (ConnectPeer after OpenAMQueue, for a peer that
// sends its packed region on connection): a message of an id with no
// queue is dropped, as are those past the 64 a queue holds unreceived.
type AMQueue struct {
	imp *Importer
	id  ucp.AMID
	q   *ucp.AMQueue // export mode
	ch  chan *AMMessage

	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

// AMMessage is an active message a third peer sent: receive its payload
// into a region (Region.ReceiveAM) or Drop it.
type AMMessage struct {
	Header []byte
	// Data is an eager message's payload when it is at most 16 KiB
	// (a peer's packed region, say); otherwise nil: receive the payload
	// into a region (Region.ReceiveAM).
	Data []byte

	imp  *Importer
	id   uint64         // rkey mode: the data path's
	m    *ucp.AMMessage // export mode
	n    int
	rndv bool
	once sync.Once
}

// Len is the payload's length.
func (m *AMMessage) Len() int { return m.n }

// IsRendezvous says whether the payload waits at the sender until received.
func (m *AMMessage) IsRendezvous() bool { return m.rndv }

// Drop lets the message go without receiving it.
func (m *AMMessage) Drop() {
	m.once.Do(func() {
		if m.m != nil {
			m.m.Drop()
		} else if m.imp.dp != nil {
			m.imp.dp.DropAM(m.id)
		}
	})
}

// amQueueDepth bounds the messages a queue holds before it drops.
const amQueueDepth = 64

// OpenAMQueue takes the active messages of id from any third peer.
func (imp *Importer) OpenAMQueue(id AMID) (*AMQueue, error) {
	const op = "share: open active-message queue"
	if err := imp.open(op); err != nil {
		return nil, err
	}
	q := &AMQueue{imp: imp, id: id, ch: make(chan *AMMessage, amQueueDepth), done: make(chan struct{})}
	imp.mu.Lock()
	imp.queues = append(imp.queues, q)
	imp.mu.Unlock()
	if imp.dp == nil {
		if _, err := imp.ucx(); err != nil {
			return nil, err
		}
		uq, err := imp.w.OpenAMQueue(id)
		if err != nil {
			return nil, err
		}
		q.q = uq
		go func() {
			for {
				m, err := uq.Receive(context.Background())
				if err != nil {
					return
				}
				am := &AMMessage{Header: m.Header, Data: m.Data, imp: imp, m: m, n: m.Len(), rndv: m.IsRendezvous()}
				select {
				case q.ch <- am:
				default:
					m.Drop()
				}
			}
		}()
		return q, nil
	}
	imp.mu.Lock()
	if _, dup := imp.amQueues[id]; dup {
		imp.mu.Unlock()
		return nil, errs.New(op, ucs.ErrBusy, "active message %d has a queue already", id)
	}
	imp.amQueues[id] = q
	imp.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), imp.o.handshake)
	defer cancel()
	if err := imp.dp.OpenAMQueue(uint16(id)).Wait(ctx); err != nil {
		imp.mu.Lock()
		delete(imp.amQueues, id)
		imp.mu.Unlock()
		return nil, wrapDP(op, err)
	}
	return q, nil
}

// onAM routes a message the data path reports to its queue.
func (imp *Importer) onAM(a datapath.AM) {
	imp.mu.Lock()
	q := imp.amQueues[ucp.AMID(a.AMID)]
	imp.mu.Unlock()
	m := &AMMessage{Header: a.Header, Data: a.Data, imp: imp, id: a.ID, n: a.Len, rndv: a.Rndv}
	if q == nil {
		go m.Drop()
		return
	}
	select {
	case q.ch <- m:
	default:
		go m.Drop()
	}
}

// Receive waits for the next message.
func (q *AMQueue) Receive(ctx context.Context) (*AMMessage, error) {
	const op = "share: receive active message"
	select {
	case m := <-q.ch:
		return m, nil
	case <-q.done:
		return nil, errs.New(op, ucs.ErrClosed, "the queue is closed")
	case <-ctx.Done():
		return nil, ctxError(op, ctx.Err())
	}
}

// Close stops taking messages (those taken and not received are dropped);
// closing twice returns nil. The Importer's Close closes every queue.
func (q *AMQueue) Close() error {
	if !q.closeLocal() {
		return nil
	}
	imp := q.imp
	var err error
	if q.q != nil {
		err = q.q.Close()
	} else {
		imp.mu.Lock()
		delete(imp.amQueues, q.id)
		imp.mu.Unlock()
		err = imp.closeWait("share: close active-message queue", imp.dp.CloseAMQueue(uint16(q.id)))
	}
	for {
		select {
		case m := <-q.ch:
			m.Drop()
		default:
			return err
		}
	}
}

// ctxError is the error of a call whose ctx ended first.
func ctxError(op string, ce error) error { return errs.Ctx(op, ce, "") }

// closeLocal marks q closed (Receive returns), once: false after the
// first.
func (q *AMQueue) closeLocal() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.closed = true
	close(q.done)
	return true
}
