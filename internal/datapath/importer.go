package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// importer is an importer's data path, in its process: one endpoint to
// the exporter's data path, the regions unpacked on it by generation, and
// the staging file it shares with its parent, registered. The parent
// trusts what it reads from the staging file no more than the exporter.
type importer struct {
	c     *child
	ep    *ucp.Endpoint
	stage []byte
	mem   *ucp.Mem

	mu      sync.Mutex
	regions map[uint64]ucp.RemoteRegion
}

// startImport opens UCX, maps and registers the staging file (the one
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
	imp := &importer{c: c, stage: b, regions: map[uint64]ucp.RemoteRegion{}}
	if imp.mem, err = c.uctx.RegisterPointer(unsafe.Pointer(unsafe.SliceData(b)), len(b), ucp.WithProt(ucp.ProtLocalRead|ucp.ProtLocalWrite)); err != nil {
		return err
	}
	if _, err := fence(c.cfg.Peer); err != nil {
		return err
	}
	cutOthers(c.cfg.Peer)
	if imp.ep, err = c.w.Connect(c.cfg.Connect.String()); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
	if _, err := fence(netip.Addr{}); err != nil {
		return err
	}
	c.imp = imp
	go func() {
		<-imp.ep.Failed()
		c.send(message{Op: "peer-failed"})
	}()
	return c.send(message{Op: "ready"})
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
		msg := fmt.Sprintf(format, a...)
		if len(msg) > maxErr-8 { // room for a rune the cut split, as JSON writes it
			msg = msg[:maxErr-8]
		}
		c.send(message{Op: "error", Seq: m.Seq, Err: msg, Status: int8(st)})
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
		c.send(message{Op: "unpacked", Seq: m.Seq, Gen: m.Gen, Addr: rr.Base(), Len: uint64(rr.Len())})
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
	case "get", "put":
		imp.mu.Lock()
		rr, ok := imp.regions[m.Gen]
		imp.mu.Unlock()
		switch {
		case !ok:
			fail("no generation %d", m.Gen)
		case m.Len == 0 || m.Off > uint64(rr.Len()) || m.Len > uint64(rr.Len())-m.Off:
			fail("%d bytes at %d are outside the region (%d bytes)", m.Len, m.Off, rr.Len())
		case m.SOff > uint64(len(imp.stage)) || m.Len > uint64(len(imp.stage))-m.SOff:
			fail("%d bytes at %d are outside the staging file (%d bytes)", m.Len, m.SOff, len(imp.stage))
		default:
			go func() {
				if err := imp.move(rr, m.Op == "put", int(m.Off), int(m.SOff), int(m.Len)); err != nil {
					fail("%v", err)
					return
				}
				c.send(message{Op: "moved", Seq: m.Seq, Gen: m.Gen})
			}()
		}
	}
}

// move runs one move: operations of Chunk bytes, Depth in flight, each
// waited for in order (a write is flushed by a flush request). Every
// operation it started has ended when it returns.
func (imp *importer) move(rr ucp.RemoteRegion, write bool, off, soff, n int) error {
	chunk, depth := imp.c.cfg.Chunk, imp.c.cfg.Depth
	ring := make([]ucp.Request, 0, depth)
	bg := context.Background()
	var first error
	for a := 0; ; {
		for first == nil && a < n && len(ring) < depth {
			b := min(a+chunk, n)
			var req ucp.Request
			var err error
			if write {
				req, err = rr.PutMem(imp.mem, soff+a, b-a, off+a)
			} else {
				req, err = rr.GetMem(imp.mem, soff+a, b-a, off+a)
			}
			if err != nil {
				first = err
				break
			}
			ring = append(ring, req)
			a = b
		}
		if len(ring) == 0 {
			break
		}
		if err := ring[0].Wait(bg); err != nil && first == nil {
			first = err
		}
		ring = ring[1:]
	}
	return first
}
