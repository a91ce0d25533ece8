package datapath

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ucxgo/ucx/ucp"
)

// A binary that imports this package becomes a data-path process when its
// parent started it as one (Start): before the binary's main package is
// initialised, it serves its parent and exits.
func init() {
	if os.Getenv(envRole) == "" {
		return
	}
	os.Exit(serve())
}

// child is the data-path process's state.
type child struct {
	conn *net.UnixConn
	wmu  sync.Mutex
	cfg  Config
	uctx *ucp.Context
	w    *ucp.Worker
	l    *ucp.Listener

	imp *importer // an importer's data path

	mu      sync.Mutex
	bound   *ucp.Endpoint
	binding bool            // a claim was accepted: the endpoint is being bound
	pending []*ucp.Endpoint // accepted from the peer's host, not yet claimed
	claims  map[uint64]*ucp.Endpoint
	early   map[*ucp.Endpoint][]byte // bind messages that came before their endpoint was filed
	nclaim  uint64
	maps    map[uint64]*mapping
}

type mapping struct {
	b     []byte
	mem   *ucp.Mem
	n     uint64 // bytes granted (registered) from b's start
	write bool   // granted writable (b is mapped writable)
}

func serve() int {
	if os.Getenv(envRole) != protoVersion {
		fmt.Fprintf(os.Stderr, "ucxshare-datapath: started by a parent of protocol %q, this binary speaks %q\n", os.Getenv(envRole), protoVersion)
		return 2
	}
	// Nothing of the parent's but the connection to it: a descriptor that
	// survived the exec (made without close-on-exec, as UCX makes its
	// sockets) is closed before anything else runs here, so that neither
	// this process nor a peer that takes it over holds another session's
	// or the service's sockets, and fence never touches them.
	closeInherited()
	// No privilege this process gains by exec, whatever the peer makes it
	// run (PR_SET_NO_NEW_PRIVS).
	syscall.RawSyscall6(syscall.SYS_PRCTL, 38, 1, 0, 0, 0, 0)
	parent := os.NewFile(3, "datapath-parent")
	fc, err := net.FileConn(parent) // a duplicate: descriptor 3 is closed now, not by a finalizer at a garbage collection to come
	parent.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ucxshare-datapath:", err)
		return 2
	}
	c := &child{conn: fc.(*net.UnixConn), maps: map[uint64]*mapping{}, claims: map[uint64]*ucp.Endpoint{}, early: map[*ucp.Endpoint][]byte{}}
	buf := make([]byte, maxMessage)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	m, fds, err := c.recv(buf, oob)
	if err != nil || m.Op != "init" || m.Init == nil {
		fmt.Fprintln(os.Stderr, "ucxshare-datapath: no init message:", err)
		return 2
	}
	c.cfg = *m.Init
	if c.cfg.Import {
		err = c.startImport(fds)
	} else {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		err = c.start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ucxshare-datapath:", err)
		return 1
	}
	for {
		m, fds, err := c.recv(buf, oob)
		if err != nil {
			// The parent closed its end, or died: nothing here is worth
			// saving, and the exit unmaps everything.
			return 0
		}
		switch {
		case m.Op == "map" && !c.cfg.Import:
			c.doMap(m, fds)
		case m.Op == "unmap" && !c.cfg.Import:
			c.doUnmap(m)
		case c.cfg.Import && m.Op == "connect" && len(fds) == 0:
			go c.imp.connect(m)
		case c.cfg.Import && m.Op == "buffer":
			c.imp.addBuffer(m, fds)
		case c.cfg.Import && len(fds) == 0 && (m.Op == "unpack" || m.Op == "drop" || m.Op == "get" || m.Op == "put" ||
			m.Op == "flush" || m.Op == "unbuffer" || m.Op == "cancel"):
			c.imp.do(m)
		case c.cfg.Import && len(fds) == 0 && m.Op == "atomic":
			go c.imp.atomic(m)
		case c.cfg.Import && len(fds) == 0 && offloadOps[m.Op]:
			c.imp.doOffload(m)
		case !c.cfg.Import && len(fds) == 0 && m.Op == "keep":
			n := cutExcept(c.cfg.Peer, m.Ports)
			c.send(message{Op: "kept", Seq: m.Seq, Len: uint64(n)})
		case !c.cfg.Import && len(fds) == 0 && (m.Op == "claim-accepted" || m.Op == "claim-refused"):
			c.claimed(m.Seq, m.Op == "claim-accepted")
		default:
			for _, fd := range fds {
				syscall.Close(fd)
			}
			c.send(message{Op: "error", Seq: m.Seq, Err: "unknown operation " + m.Op})
		}
	}
}

// start opens UCX: a context with RMA (and active messages for the bind),
// one worker progressed by a goroutine, one listener.
func (c *child) start() error {
	opts := []ucp.ContextOption{ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureAM), ucp.WithName(c.cfg.Name),
		ucp.WithUnmapQuarantine(0)} // an unmapped generation is unmapped at once: a late peer operation kills this process, no other
	for _, kv := range c.cfg.UCX {
		opts = append(opts, ucp.WithConfig(kv[0], kv[1]))
	}
	var err error
	if c.uctx, err = ucp.NewContext(opts...); err != nil {
		return err
	}
	if c.w, err = c.uctx.NewWorker(); err != nil {
		return err
	}
	go c.w.Run(context.Background())
	if err := c.w.SetAMHandler(ucp.AMID(c.cfg.AMBind), c.onBind); err != nil {
		return err
	}
	if c.cfg.AMAtomic != 0 {
		if err := c.w.SetAMHandler(ucp.AMID(c.cfg.AMAtomic), c.onAtomic); err != nil {
			return err
		}
	}
	if c.l, err = c.w.Listen(listenAddr(c.cfg)); err != nil {
		return err
	}
	// From here no other host reaches this process over tcp: not its
	// listener, not UCX's own tcp interfaces (fence).
	if _, err := fence(c.cfg.Peer); err != nil {
		return err
	}
	cutOthers(c.cfg.Peer)
	go c.accept()
	return c.send(message{Op: "ready", Port: c.l.Addr().Port()})
}

// accept takes connections from the peer's host until one is claimed;
// the others are closed then.
func (c *child) accept() {
	for {
		cr, err := c.l.AcceptRequest(context.Background())
		if err != nil {
			return
		}
		c.mu.Lock()
		ok := c.bound == nil && !c.binding && len(c.pending) < 8 && cr.ClientAddr().Addr().Unmap() == c.cfg.Peer.Unmap()
		c.mu.Unlock()
		if !ok {
			cr.Reject()
			continue
		}
		ep, err := cr.Accept()
		if err != nil {
			continue
		}
		// The peer's token can arrive (onBind, in the worker's progress)
		// before this goroutine files ep: then ep is the bound endpoint,
		// not a late one.
		c.mu.Lock()
		late := c.bound != nil || c.binding
		var seq uint64
		header, early := c.early[ep]
		delete(c.early, ep)
		if !late {
			c.pending = append(c.pending, ep)
			if early {
				seq = c.claimLocked(ep)
			}
		}
		c.mu.Unlock()
		switch {
		case late:
			ep.Close(context.Background(), ucp.CloseForce)
		case early:
			c.send(message{Op: "claim", Seq: seq, Key: header})
		}
	}
}

// onBind runs in the worker's progress: a bind message from an endpoint
// accepted from the peer's host goes to the parent, which alone can judge
// its header (the importer's sealed proof); this process holds nothing a
// peer could read to forge one. Each endpoint claims once.
func (c *child) onBind(m *ucp.AMMessage) {
	ep := m.Reply()
	if ep == nil || len(m.Header) == 0 || len(m.Header) > maxKey {
		return
	}
	header := bytes.Clone(m.Header)
	c.mu.Lock()
	if c.bound != nil || c.binding {
		c.mu.Unlock()
		return
	}
	if !slices.Contains(c.pending, ep) {
		// The message can arrive (in the worker's progress) before the
		// accepting goroutine files the endpoint it accepted: kept until
		// then (accept).
		if _, seen := c.early[ep]; !seen && len(c.early) < 8 {
			c.early[ep] = header
		}
		c.mu.Unlock()
		return
	}
	seq := c.claimLocked(ep)
	c.mu.Unlock()
	c.send(message{Op: "claim", Seq: seq, Key: header})
}

// claimLocked moves ep, which sent a bind message, from pending to the
// claims the parent judges (one claim per endpoint), under c.mu.
func (c *child) claimLocked(ep *ucp.Endpoint) uint64 {
	if i := slices.Index(c.pending, ep); i >= 0 {
		c.pending = slices.Delete(c.pending, i, i+1)
	}
	c.nclaim++
	c.claims[c.nclaim] = ep
	return c.nclaim
}

// claimed applies the parent's judgement of claim seq: the endpoint is
// bound, or closed.
func (c *child) claimed(seq uint64, ok bool) {
	c.mu.Lock()
	ep := c.claims[seq]
	delete(c.claims, seq)
	if ep == nil {
		c.mu.Unlock()
		return
	}
	if !ok || c.bound != nil || c.binding {
		c.mu.Unlock()
		go ep.Close(context.Background(), ucp.CloseForce)
		return
	}
	c.binding = true
	c.bound = ep
	others := append(c.pending, slices.Collect(maps.Values(c.claims))...)
	c.pending, c.claims = nil, map[uint64]*ucp.Endpoint{}
	c.mu.Unlock()
	go func() {
		c.l.Close()
		for _, o := range others {
			o.Close(context.Background(), ucp.CloseForce)
		}
		// Nobody connects any more, the peer's host included: its
		// endpoint is wired up, and another process there gets no
		// connection to this one.
		if _, err := fence(); err != nil {
			fmt.Fprintln(os.Stderr, "ucxshare-datapath:", err)
			os.Exit(3)
		}
		c.send(message{Op: "bound"})
		<-ep.Failed()
		c.send(message{Op: "peer-failed"})
	}()
}

func (c *child) doMap(m message, fds []int) {
	fail := func(format string, a ...any) {
		c.send(message{Op: "error", Seq: m.Seq, Err: fmt.Sprintf(format, a...)})
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		fail("map without exactly one file (%d)", len(fds))
		return
	}
	prot, uprot := syscall.PROT_READ, ucp.ProtLocalRead|ucp.ProtRemoteRead
	if m.Write {
		prot |= syscall.PROT_WRITE
		uprot |= ucp.ProtLocalWrite | ucp.ProtRemoteWrite
		if m.NoRead { // a write-only grant: its key says so (the mapping cannot)
			uprot &^= ucp.ProtRemoteRead
		}
	}
	if m.Len == 0 || m.Len > m.Size || m.Size > 1<<48 {
		syscall.Close(fds[0])
		fail("map of %d bytes in %d", m.Len, m.Size)
		return
	}
	b, err := syscall.Mmap(fds[0], 0, int(m.Size), prot, syscall.MAP_SHARED)
	// The file is closed at once: with no descriptor left, this process
	// cannot map it again, nor more of it, nor writable.
	syscall.Close(fds[0])
	if err != nil {
		fail("mapping %d bytes: %v", m.Len, err)
		return
	}
	hugePages(b)
	mem, err := c.uctx.RegisterPointer(unsafe.Pointer(unsafe.SliceData(b)), int(m.Len), ucp.WithProt(uprot))
	if err != nil {
		syscall.Munmap(b)
		fail("%v", err)
		return
	}
	key, err := mem.PackRegion()
	if err != nil {
		mem.Close()
		syscall.Munmap(b)
		fail("%v", err)
		return
	}
	c.mu.Lock()
	c.maps[m.Gen] = &mapping{b: b, mem: mem, n: m.Len, write: m.Write}
	c.mu.Unlock()
	c.send(message{Op: "mapped", Seq: m.Seq, Gen: m.Gen, Addr: mem.Address(), Key: key})
}

// doUnmap deregisters a generation and replaces its pages with an
// inaccessible reservation in one step (mmap MAP_FIXED): the range is never
// reused by this process, so a peer that still names it makes this process
// fault and end, and reaches nothing.
func (c *child) doUnmap(m message) {
	c.mu.Lock()
	mp := c.maps[m.Gen]
	delete(c.maps, m.Gen)
	c.mu.Unlock()
	if mp == nil {
		c.send(message{Op: "unmapped", Seq: m.Seq, Gen: m.Gen})
		return
	}
	mp.mem.Close()
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(mp.b)))
	_, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(len(mp.b)), syscall.PROT_NONE,
		syscall.MAP_FIXED|syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE, ^uintptr(0), 0)
	if errno != 0 {
		// The shared pages must not stay mapped: end here, the parent sees
		// the process end.
		fmt.Fprintln(os.Stderr, "ucxshare-datapath: cannot unmap a revoked generation:", errno)
		os.Exit(3)
	}
	c.send(message{Op: "unmapped", Seq: m.Seq, Gen: m.Gen})
}

func (c *child) send(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _, err = c.conn.WriteMsgUnix(b, nil, nil)
	return err
}

// recv reads the parent's next message and the descriptors it carries.
func (c *child) recv(buf, oob []byte) (message, []int, error) {
	n, oobn, _, _, err := c.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return message{}, nil, err
	}
	if n == 0 {
		return message{}, nil, errEnd
	}
	var fds []int
	if oobn > 0 {
		fds = rights(oob[:oobn])
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return message{}, nil, err
	}
	return m, fds, nil
}

func listenAddr(cfg Config) string {
	return net.JoinHostPort(cfg.Listen.Unmap().String(), "0")
}

// closeInherited closes every descriptor above 3 (the parent's
// connection) that lacks close-on-exec: those came through the exec. The
// Go runtime's own descriptors are all close-on-exec.
func closeInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 3 {
			continue
		}
		flags, _, errno := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if errno == 0 && flags&syscall.FD_CLOEXEC == 0 {
			syscall.Close(fd)
		}
	}
}

// offloadOps are the requests of an importer's offload side.
var offloadOps = map[string]bool{"peer-connect": true, "peer-close": true, "peer-unpack": true, "peer-region-close": true,
	"am-open": true, "am-close": true, "am-drop": true, "copy-to": true, "copy-from": true, "send-am": true, "am-receive": true}
