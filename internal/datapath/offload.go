package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucxgo/ucx/ucp"
)

// The offload side of an importer's data path: endpoints to third peers
// the parent names, their packed regions, active-message queues whose
// messages it reports to the parent, and the moves between the exporter's
// memory and a peer through the staging file's offload area. One offload
// runs at a time.

// Limits on what the offload side holds.
const (
	maxPeers    = 16
	maxHeld     = 64       // active messages reported and not yet received or dropped
	maxEagerFwd = 16 << 10 // eager data the report carries (more: none, receive it into a region)
)

type offload struct {
	mu       sync.Mutex
	run      sync.Mutex   // one offload at a time
	allowed  []netip.Addr // the peers' hosts, let through the fence
	peers    map[uint64]*ucp.Endpoint
	addrs    map[uint64]netip.Addr
	pregions map[uint64]ucp.RemoteRegion
	queues   map[uint16]*ucp.AMQueue
	held     map[uint64]*ucp.AMMessage
	next     uint64
}

func (imp *importer) off() *offload {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if imp.o == nil {
		imp.o = &offload{peers: map[uint64]*ucp.Endpoint{}, addrs: map[uint64]netip.Addr{},
			pregions: map[uint64]ucp.RemoteRegion{}, queues: map[uint16]*ucp.AMQueue{}, held: map[uint64]*ucp.AMMessage{}}
	}
	return imp.o
}

// area is the staging file's offload area.
func (imp *importer) area() []byte {
	c := imp.c.cfg
	return imp.stage[c.OffBase : c.OffBase+c.OffSize]
}

// doOffload runs one of the parent's offload requests.
func (imp *importer) doOffload(m message) {
	c, o := imp.c, imp.off()
	fail := func(err error) {
		c.send(message{Op: "error", Seq: m.Seq, Err: truncate(err.Error()), Status: statusOf(err)})
	}
	switch m.Op {
	case "peer-connect":
		go func() {
			id, err := imp.connectPeer(m.Peer)
			if err != nil {
				fail(err)
				return
			}
			c.send(message{Op: "peer", Seq: m.Seq, Buf: id})
		}()
	case "peer-close":
		o.mu.Lock()
		ep := o.peers[m.Buf]
		delete(o.peers, m.Buf)
		if a, ok := o.addrs[m.Buf]; ok {
			delete(o.addrs, m.Buf)
			if i := slices.Index(o.allowed, a); i >= 0 {
				o.allowed = slices.Delete(o.allowed, i, i+1)
			}
		}
		allowed := slices.Clone(o.allowed)
		o.mu.Unlock()
		fence(allowed...)
		if ep == nil {
			fail(fmt.Errorf("no peer %d", m.Buf))
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if ep.Close(ctx, ucp.CloseFlush) != nil {
				ep.Close(ctx, ucp.CloseForce)
			}
			c.send(message{Op: "done", Seq: m.Seq})
		}()
	case "peer-unpack":
		o.mu.Lock()
		ep := o.peers[m.Buf]
		o.mu.Unlock()
		if ep == nil {
			fail(fmt.Errorf("no peer %d", m.Buf))
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rr, err := ep.UnpackRegion(ctx, m.Key)
			if err != nil {
				fail(err)
				return
			}
			o.mu.Lock()
			o.next++
			id := o.next
			o.pregions[id] = rr
			o.mu.Unlock()
			c.send(message{Op: "peer-region", Seq: m.Seq, Buf: id, Len: uint64(rr.Len())})
		}()
	case "peer-region-close":
		o.mu.Lock()
		rr, ok := o.pregions[m.Buf]
		delete(o.pregions, m.Buf)
		o.mu.Unlock()
		if ok {
			rr.Key().Close()
		}
		c.send(message{Op: "done", Seq: m.Seq})
	case "am-open":
		o.mu.Lock()
		_, dup := o.queues[m.AM]
		o.mu.Unlock()
		if dup {
			fail(fmt.Errorf("active message %d has a queue already", m.AM))
			return
		}
		q, err := c.w.OpenAMQueue(ucp.AMID(m.AM))
		if err != nil {
			fail(err)
			return
		}
		o.mu.Lock()
		o.queues[m.AM] = q
		o.mu.Unlock()
		go imp.report(q, m.AM)
		c.send(message{Op: "done", Seq: m.Seq})
	case "am-close":
		o.mu.Lock()
		q := o.queues[m.AM]
		delete(o.queues, m.AM)
		o.mu.Unlock()
		if q != nil {
			q.Close()
		}
		c.send(message{Op: "done", Seq: m.Seq})
	case "am-drop":
		o.mu.Lock()
		am := o.held[m.Buf]
		delete(o.held, m.Buf)
		o.mu.Unlock()
		if am != nil {
			am.Drop()
		}
	case "copy-to", "copy-from", "send-am", "am-receive":
		go func() {
			o.run.Lock()
			defer o.run.Unlock()
			if err := imp.offloadMove(m); err != nil {
				fail(err)
				return
			}
			c.send(message{Op: "moved", Seq: m.Seq, Len: m.Len})
		}()
	}
}

// connectPeer admits addr's host through the fence, connects an endpoint
// to it and waits for the wire-up.
func (imp *importer) connectPeer(addr string) (uint64, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return 0, fmt.Errorf("peer address %q: %w", addr, err)
	}
	o := imp.off()
	o.mu.Lock()
	if len(o.peers) >= maxPeers {
		o.mu.Unlock()
		return 0, fmt.Errorf("%d peers already", maxPeers)
	}
	o.allowed = append(o.allowed, ap.Addr().Unmap())
	allowed := slices.Clone(o.allowed)
	o.mu.Unlock()
	// The peer's UCX may connect back to this process's: its host is let
	// through while it is a peer.
	if _, err := fence(allowed...); err != nil {
		return 0, err
	}
	unfence := func() {
		o.mu.Lock()
		if i := slices.Index(o.allowed, ap.Addr().Unmap()); i >= 0 {
			o.allowed = slices.Delete(o.allowed, i, i+1)
		}
		allowed := slices.Clone(o.allowed)
		o.mu.Unlock()
		fence(allowed...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, err := imp.c.w.Connect(ctx, ap.String())
	if err != nil {
		unfence()
		return 0, err
	}
	o.mu.Lock()
	o.next++
	id := o.next
	o.peers[id] = ep
	o.addrs[id] = ap.Addr().Unmap()
	o.mu.Unlock()
	return id, nil
}

// report tells the parent of each message of queue id, holding it until
// the parent receives or drops it.
func (imp *importer) report(q *ucp.AMQueue, id uint16) {
	o := imp.off()
	for {
		am, err := q.Receive(context.Background())
		if err != nil {
			return // the queue was closed
		}
		o.mu.Lock()
		full := len(o.held) >= maxHeld
		var n uint64
		if !full {
			o.next++
			n = o.next
			o.held[n] = am
		}
		o.mu.Unlock()
		if full || len(am.Header) > maxKey {
			if !full {
				o.mu.Lock()
				delete(o.held, n)
				o.mu.Unlock()
			}
			am.Drop()
			continue
		}
		data := am.Data
		if len(data) > maxEagerFwd {
			data = nil // received into a region (am-receive), not reported
		}
		imp.c.send(message{Op: "am", Buf: n, AM: id, Key: am.Header, Data: data, Len: uint64(am.Len()), Rndv: am.IsRendezvous()})
	}
}

// offloadMove runs one offload move through the offload area.
func (imp *importer) offloadMove(m message) error {
	o := imp.off()
	imp.mu.Lock()
	src, ok := imp.regions[m.Gen]
	imp.mu.Unlock()
	if !ok {
		return fmt.Errorf("no generation %d", m.Gen)
	}
	if m.Len > uint64(src.Len()) || m.Off > uint64(src.Len())-m.Len {
		return fmt.Errorf("%d bytes at %d are outside the region (%d bytes)", m.Len, m.Off, src.Len())
	}
	area := imp.area()
	n, off := int(m.Len), int(m.Off)
	bg := context.Background()
	switch m.Op {
	case "copy-to", "copy-from":
		o.mu.Lock()
		pr, ok := o.pregions[m.Buf]
		o.mu.Unlock()
		if !ok {
			return fmt.Errorf("no peer region %d", m.Buf)
		}
		if m.SOff > uint64(pr.Len()) || m.Len > uint64(pr.Len())-m.SOff {
			return fmt.Errorf("%d bytes at %d are outside the peer's region (%d bytes)", m.Len, m.SOff, pr.Len())
		}
		from, to, fromOff, toOff := src, pr, off, int(m.SOff)
		if m.Op == "copy-from" {
			from, to, fromOff, toOff = pr, src, int(m.SOff), off
		}
		if err := imp.staged(area, from, to, fromOff, toOff, n); err != nil {
			return err
		}
		return to.Flush(bg)
	case "send-am":
		o.mu.Lock()
		ep := o.peers[m.Buf]
		o.mu.Unlock()
		if ep == nil {
			return fmt.Errorf("no peer %d", m.Buf)
		}
		if n > len(area) {
			return fmt.Errorf("%d bytes do not fit the %d-byte offload area", n, len(area))
		}
		if _, err := imp.move(src, area, false, off, 0, n, &noStop); err != nil {
			return err
		}
		req, err := ep.SendAM(ucp.AMID(m.AM), m.Key, area[:n], ucp.AMRndv)
		if err != nil {
			return err
		}
		return req.Wait(bg)
	case "am-receive":
		o.mu.Lock()
		am := o.held[m.Buf]
		delete(o.held, m.Buf)
		o.mu.Unlock()
		if am == nil {
			return fmt.Errorf("no active message %d", m.Buf)
		}
		if am.Len() != n || n > len(area) {
			am.Drop()
			return fmt.Errorf("a message of %d bytes, %d asked, a %d-byte offload area", am.Len(), n, len(area))
		}
		req, err := am.ReceiveInto(area[:n])
		if err != nil {
			am.Drop()
			return err
		}
		if err := req.Wait(bg); err != nil {
			return err
		}
		if _, err := imp.move(src, area, true, off, 0, n, &noStop); err != nil {
			return err
		}
		return src.Flush(bg)
	}
	return errors.New("unknown offload " + m.Op)
}

var noStop atomic.Bool // never set: an offload move runs to its end

// staged copies n bytes from region from at fromOff to region to at toOff
// through area, chunk by chunk in its two halves: a chunk is got into one
// half, then put out of it while the next is got into the other.
func (imp *importer) staged(area []byte, from, to ucp.RemoteRegion, fromOff, toOff, n int) error {
	half := len(area) / 2
	chunk := min(imp.c.cfg.Chunk, half)
	bg := context.Background()
	var outs [2]ucp.Request
	var started [2]bool
	var first error
	for i, a := 0, 0; a < n; i, a = i+1, a+chunk {
		b, h := min(a+chunk, n), i%2
		buf := area[h*half : h*half+b-a]
		if started[h] {
			started[h] = false
			if err := outs[h].Wait(bg); err != nil {
				first = err
				break
			}
		}
		req, err := from.Get(buf, fromOff+a)
		if err == nil {
			err = req.Wait(bg)
		}
		if err != nil {
			first = err
			break
		}
		if outs[h], err = to.Put(buf, toOff+a); err != nil {
			first = err
			break
		}
		started[h] = true
	}
	for h := range outs {
		if started[h] {
			if err := outs[h].Wait(bg); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
