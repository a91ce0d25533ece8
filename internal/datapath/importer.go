package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// importer is an importer's data path, in its process: one endpoint to
// the exporter's data path, the regions unpacked on it by generation, the
// staging file it shares with its parent and the parent's buffers, mapped.
// The parent trusts what it reads from them no more than the exporter.
type importer struct {
	c     *child
	ep    *ucp.Endpoint
	stage []byte

	mu       sync.Mutex
	regions  map[uint64]ucp.RemoteRegion
	buffers  map[uint64]*ibuf
	nbuf     uint64
	o        *offload              // made on the first offload request
	atomics  map[uint64]atomicWait // atomics waiting for their answer, by request
	nAtomic  uint64
	canceled map[uint64]*atomic.Bool // moves in flight, by request
}

// ibuf is a buffer of the parent's, mapped here.
type ibuf struct {
	b    []byte
	refs int
}

// startImport opens UCX, maps the staging file (the one
// descriptor of the init message), connects to the exporter's data path
// and claims the connection with the token; then no other host, and after
// the wire-up no one, connects to this process over tcp (fence).
func (c *child) startImport(fds []int) error {
	if len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return fmt.Errorf("an importer's init with %d files, not the staging file", len(fds))
	}
	b, err := syscall.Mmap(fds[0], 0, c.cfg.Staging, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	syscall.Close(fds[0])
	if err != nil {
		return fmt.Errorf("mapping the staging file: %w", err)
	}
	hugePages(b)
	opts := []ucp.ContextOption{ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureAM), ucp.WithName(c.cfg.Name)}
	for _, kv := range c.cfg.UCX {
		opts = append(opts, ucp.WithConfig(kv[0], kv[1]))
	}
	if c.uctx, err = ucp.NewContext(opts...); err != nil {
		return err
	}
	if c.w, err = c.uctx.NewWorker(); err != nil {
		return err
	}
	go c.w.Run(context.Background())
	imp := &importer{c: c, stage: b, regions: map[uint64]ucp.RemoteRegion{}, buffers: map[uint64]*ibuf{},
		canceled: map[uint64]*atomic.Bool{}, atomics: map[uint64]atomicWait{}}
	if c.cfg.AMAtomic != 0 {
		if err := c.w.SetAMHandler(ucp.AMID(c.cfg.AMAtomic+1), imp.onAtomicAnswer); err != nil {
			return err
		}
	}
	if _, err := fence(c.cfg.Peer); err != nil {
		return err
	}
	cutOthers(c.cfg.Peer)
	c.imp = imp
	return c.send(message{Op: "ready"})
}

// connect connects to the exporter's data path at m.Peer (the exporter's
// host, which the fence lets through) and claims the connection with the
// bind claim; then no one connects to this process over tcp.
func (imp *importer) connect(m message) {
	c := imp.c
	err := func() error {
		ap, err := netip.ParseAddrPort(m.Peer)
		if err != nil || ap.Addr().Unmap() != c.cfg.Peer.Unmap() || imp.ep != nil {
			return fmt.Errorf("connect to %q: not the exporter's host %s, or connected already", m.Peer, c.cfg.Peer)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if imp.ep, err = c.w.Connect(ctx, ap.String()); err != nil {
			return err
		}
		req, err := imp.ep.SendAM(ucp.AMID(c.cfg.AMBind), c.cfg.Bind, nil, ucp.AMReply)
		if err != nil {
			return err
		}
		if err := req.Wait(ctx); err != nil {
			return err
		}
		// The wire-up is complete once a flush is: every connection this
		// endpoint needs is made, and no one connects from here on.
		if err := imp.ep.Flush(ctx); err != nil {
			return err
		}
		_, err = fence()
		return err
	}()
	if err != nil {
		c.send(message{Op: "error", Seq: m.Seq, Err: truncate(err.Error()), Status: statusOf(err)})
		return
	}
	go func() {
		<-imp.ep.Failed()
		c.send(message{Op: "peer-failed"})
	}()
	c.send(message{Op: "connected", Seq: m.Seq, Ports: localPortsWith(c.cfg.Peer)})
}

// do runs one of the parent's requests; moves run concurrently.
func (imp *importer) do(m message) {
	c := imp.c
	fail := func(format string, a ...any) {
		var st ucs.Status
		for _, x := range a {
			if err, ok := x.(error); ok && errors.As(err, &st) {
				break
			}
		}
		c.send(message{Op: "error", Seq: m.Seq, Err: truncate(fmt.Sprintf(format, a...)), Status: int8(st)})
	}
	switch m.Op {
	case "unpack":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rr, err := imp.ep.UnpackRegion(ctx, m.Key)
		if err != nil {
			fail("%v", err)
			return
		}
		imp.mu.Lock()
		old, dup := imp.regions[m.Gen]
		imp.regions[m.Gen] = rr
		imp.mu.Unlock()
		if dup {
			old.Key().Close()
		}
		c.send(message{Op: "unpacked", Seq: m.Seq, Gen: m.Gen, Addr: rr.Address(), Len: uint64(rr.Len())})
	case "drop":
		imp.mu.Lock()
		rr, ok := imp.regions[m.Gen]
		delete(imp.regions, m.Gen)
		imp.mu.Unlock()
		if !ok {
			c.send(message{Op: "dropped", Seq: m.Seq, Gen: m.Gen})
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := rr.Flush(ctx)
		rr.Key().Close()
		if err != nil {
			fail("flushing generation %d: %v", m.Gen, err)
			return
		}
		c.send(message{Op: "dropped", Seq: m.Seq, Gen: m.Gen})
	case "flush":
		imp.mu.Lock()
		rr, ok := imp.regions[m.Gen]
		imp.mu.Unlock()
		if !ok {
			fail("no generation %d", m.Gen)
			return
		}
		go func() {
			if err := rr.Flush(context.Background()); err != nil {
				fail("%v", err)
				return
			}
			c.send(message{Op: "moved", Seq: m.Seq, Gen: m.Gen})
		}()
	case "unbuffer":
		imp.mu.Lock()
		b := imp.buffers[m.Buf]
		if b != nil && b.refs == 0 {
			delete(imp.buffers, m.Buf)
		}
		imp.mu.Unlock()
		switch {
		case b == nil:
			fail("no buffer %d", m.Buf)
		case b.refs != 0:
			fail("buffer %d is in use by %d moves", m.Buf, b.refs)
		default:
			syscall.Munmap(b.b)
			c.send(message{Op: "unbuffered", Seq: m.Seq, Buf: m.Buf})
		}
	case "cancel":
		imp.mu.Lock()
		if f := imp.canceled[m.Seq]; f != nil {
			f.Store(true)
		}
		imp.mu.Unlock()
	case "get", "put":
		imp.mu.Lock()
		rr, ok := imp.regions[m.Gen]
		raw := imp.stage
		var b *ibuf
		if m.Buf != 0 {
			if b = imp.buffers[m.Buf]; b != nil {
				b.refs++
				raw = b.b
			}
		}
		stop := &atomic.Bool{}
		imp.canceled[m.Seq] = stop
		imp.mu.Unlock()
		end := func() {
			imp.mu.Lock()
			delete(imp.canceled, m.Seq)
			if b != nil {
				b.refs--
			}
			imp.mu.Unlock()
		}
		switch {
		case !ok:
			end()
			fail("no generation %d", m.Gen)
		case m.Buf != 0 && b == nil:
			end()
			fail("no buffer %d", m.Buf)
		case m.Len == 0 || m.Off > uint64(rr.Len()) || m.Len > uint64(rr.Len())-m.Off:
			end()
			fail("%d bytes at %d are outside the region (%d bytes)", m.Len, m.Off, rr.Len())
		case m.SOff > uint64(len(raw)) || m.Len > uint64(len(raw))-m.SOff:
			end()
			fail("%d bytes at %d are outside the buffer (%d bytes)", m.Len, m.SOff, len(raw))
		default:
			go func() {
				defer end()
				done, err := imp.move(rr, raw, m.Op == "put", int(m.Off), int(m.SOff), int(m.Len), stop)
				if err == nil && stop.Load() && done < int(m.Len) {
					err = errors.New("canceled")
				}
				if err != nil {
					var st ucs.Status
					errors.As(err, &st)
					c.send(message{Op: "error", Seq: m.Seq, Err: truncate(err.Error()), Status: int8(st), Len: uint64(done)})
					return
				}
				c.send(message{Op: "moved", Seq: m.Seq, Gen: m.Gen, Len: uint64(done)})
			}()
		}
	}
}

// addBuffer maps a buffer of the parent's (the one
// descriptor of the message, Size bytes).
func (imp *importer) addBuffer(m message, fds []int) {
	c := imp.c
	fail := func(format string, a ...any) {
		c.send(message{Op: "error", Seq: m.Seq, Err: truncate(fmt.Sprintf(format, a...))})
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		fail("a buffer with %d files", len(fds))
		return
	}
	if m.Size == 0 || m.Size > 1<<40 {
		syscall.Close(fds[0])
		fail("a buffer of %d bytes", m.Size)
		return
	}
	b, err := syscall.Mmap(fds[0], 0, int(m.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	syscall.Close(fds[0])
	if err != nil {
		fail("mapping a buffer of %d bytes: %v", m.Size, err)
		return
	}
	hugePages(b)
	imp.mu.Lock()
	imp.nbuf++
	id := imp.nbuf
	imp.buffers[id] = &ibuf{b: b}
	imp.mu.Unlock()
	c.send(message{Op: "buffered", Seq: m.Seq, Buf: id})
}

// statusOf is the UCX status err's cause is, 0 when none.
func statusOf(err error) int8 {
	var st ucs.Status
	errors.As(err, &st)
	return int8(st)
}

// truncate bounds an error's text as the parent takes it, with room for
// a rune the cut split (JSON writes it as three bytes).
func truncate(msg string) string {
	if len(msg) > maxErr-8 {
		return msg[:maxErr-8]
	}
	return msg
}

// move runs one move between the region and raw at soff: operations of
// Chunk bytes, Depth in flight, each waited for in order (a write is
// flushed by a flush request); it starts no more once stop is set. Every
// operation it started has ended when it returns, with the bytes done in
// order.
func (imp *importer) move(rr ucp.RemoteRegion, raw []byte, write bool, off, soff, n int, stop *atomic.Bool) (int, error) {
	// Get and Put of the mapping as plain memory: with a registration
	// (GetMem), 64 MiB of gets over tcp took about a fifth longer
	// (1.18.1, the bench's ShareRead64M).
	chunk, depth := imp.c.cfg.Chunk, imp.c.cfg.Depth
	type op struct {
		req  ucp.Request
		a, b int
	}
	ring := make([]op, 0, depth)
	bg := context.Background()
	var first error
	done := 0
	for a := 0; ; {
		for first == nil && a < n && len(ring) < depth && !stop.Load() {
			b := min(a+chunk, n)
			var req ucp.Request
			var err error
			if write {
				req, err = rr.Put(raw[soff+a:soff+b], off+a)
			} else {
				req, err = rr.Get(raw[soff+a:soff+b], off+a)
			}
			if err != nil {
				first = err
				break
			}
			ring = append(ring, op{req, a, b})
			a = b
		}
		if len(ring) == 0 {
			break
		}
		if err := ring[0].req.Wait(bg); err != nil && first == nil {
			first = err
		}
		if first == nil && ring[0].a == done {
			done = ring[0].b
		}
		ring = ring[1:]
	}
	return done, first
}
