// Package datapath runs a UCX data path in a process of its own: this
// binary re-executed, holding a UCX context, worker and listener, and
// mapping only the memory it is handed (shared files, read-only where the
// grant is). UCX serves any address of a process to any peer connected to
// one of its workers; a process that holds a service's memory or secrets
// therefore runs no worker, and starts one of these per peer instead.
//
// The parent (Start, Proc) trusts nothing the process sends: every message
// is size-bounded and checked in Go. The process trusts its parent, and
// nothing else: it accepts one connection, from the one host it is told,
// claimed by the token it is told, and exits when its parent's socket
// closes (or its parent dies).
package datapath

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ucxgo/ucx/ucs"
)

// envRole marks a re-executed binary as a data-path process; its value is
// the protocol version below.
const envRole = "UCXGO_SHARE_DATAPATH"

const protoVersion = "1"

// Limits on what the process may send.
const (
	maxMessage = 64 << 10
	maxKey     = 8 << 10
	maxErr     = 512
)

// Config is what a data-path process is told at its start. An exporter's
// (Start) listens, keeps the one connection its token claims, and maps
// what it is handed; an importer's (StartImport) connects to an
// exporter's, claims it with the token, and moves bytes between the
// exporter's memory and a staging file it shares with its parent.
type Config struct {
	Name   string     `json:"name"`   // names the UCX context in UCX's logs
	Listen netip.Addr `json:"listen"` // exporter's: the address its UCX listener listens on (port chosen)
	Peer   netip.Addr `json:"peer"`   // the one host it exchanges segments with over tcp
	AMBind uint16     `json:"ambind"` // the active message id of the bind message
	// AMAtomic is the active message id of an atomic's request, and
	// AMAtomic+1 its answer's (atomic.go); 0: no atomics.
	AMAtomic uint16 `json:"amatomic,omitempty"`
	// Bind is the header of the bind message an importer's sends (a
	// proof its parent sealed); an exporter's holds none, and asks its
	// parent about each header it is sent (Claim).
	Bind []byte      `json:"bind,omitempty"`
	UCX  [][2]string `json:"ucx"` // UCX configuration of its context, in order

	Import  bool `json:"import,omitempty"`  // an importer's data path
	Chunk   int  `json:"chunk,omitempty"`   // importer's: bytes of one RMA operation
	Depth   int  `json:"depth,omitempty"`   // importer's: operations of one move in flight
	Staging int  `json:"staging,omitempty"` // importer's: bytes of the staging file
	OffBase int  `json:"offbase,omitempty"` // importer's: where the offload area starts in it
	OffSize int  `json:"offsize,omitempty"` // importer's: the offload area's bytes
}

// message is one message either way on the process's socket.
type message struct {
	Op    string `json:"op"`
	Seq   uint64 `json:"seq,omitempty"`
	Gen   uint64 `json:"gen,omitempty"`
	Len   uint64 `json:"len,omitempty"`  // bytes registered and packed
	Size  uint64 `json:"size,omitempty"` // bytes mapped: Len rounded up to whole pages
	Write bool   `json:"write,omitempty"`
	// NoRead maps a region whose key grants no remote read (map).
	NoRead bool    `json:"noread,omitempty"`
	Addr   uint64  `json:"addr,omitempty"`
	Port   uint16  `json:"port,omitempty"`
	Key    []byte  `json:"key,omitempty"`
	Err    string  `json:"err,omitempty"`
	Init   *Config `json:"init,omitempty"`
	Off    uint64  `json:"off,omitempty"`  // a move's offset in the region
	SOff   uint64  `json:"soff,omitempty"` // a move's offset in the staging file
	// Status is the UCX status an error answer's cause is, 0 when none.
	Status int8 `json:"status,omitempty"`
	// Buf names a buffer of the parent's (importer's) a move uses instead
	// of the staging file (0: the staging file); in offload requests, a
	// peer, a peer's region or an active message.
	Buf  uint64 `json:"buf,omitempty"`
	Peer string `json:"peer,omitempty"` // a third peer's address (ip:port)
	AM   uint16 `json:"am,omitempty"`   // an active message id
	Data []byte `json:"data,omitempty"` // an eager active message's data
	Rndv bool   `json:"rndv,omitempty"` // a rendezvous active message
	// Ports are tcp ports on the importer's host: its data path's
	// connections with the exporter's (connected, keep).
	Ports []uint16 `json:"ports,omitempty"`
	// Atomic is an atomic's request (atomic.go); its answer's value is
	// in Addr.
	Atomic *atomicReq `json:"atomic,omitempty"`
}

// answerErr is the error an "error" answer to op stands for: a *ucs.Error
// with the UCX status the process named (ucs.ErrIOError when it named
// none) and its text.
func answerErr(op string, r message) error {
	st := ucs.ErrIOError
	if r.Status < 0 {
		st = ucs.Status(r.Status)
	}
	return &ucs.Error{Op: "data path: " + op, Err: st, Reason: r.Err}
}

// Proc is a running data-path process, seen from its parent.
type Proc struct {
	cmd    *exec.Cmd
	conn   *net.UnixConn
	stderr *tail

	wmu sync.Mutex // one message at a time

	mu   sync.Mutex
	seq  uint64
	wait map[uint64]chan message

	imports    bool // an importer's data path
	claims     func([]byte) bool
	onAM       func(AM)
	nclaims    int
	port       uint16
	ready      chan struct{}
	bound      chan struct{}
	peerFailed chan struct{}
	boundOnce  sync.Once
	failOnce   sync.Once

	killOnce sync.Once
	done     chan struct{} // closed once the process was reaped
	err      error         // how it ended, set before done closes
}

// Start starts an exporter's data-path process with cfg and returns once
// its UCX listener listens (Port), or with the error that stopped it.
// claims judges the header of each bind message a connection from the
// peer's host sends (at most maxClaims in all): the first it accepts
// binds that connection (Bound), one it refuses closes it.
func Start(ctx context.Context, cfg Config, claims func(header []byte) bool) (*Proc, error) {
	cfg.Import = false
	if claims == nil || len(cfg.Bind) != 0 {
		return nil, errors.New("data path: an exporter's judges its claims and holds no bind header")
	}
	return start(ctx, cfg, nil, claims)
}

// maxClaims bounds the bind messages an exporter's data path forwards.
const maxClaims = 16

// StartImport starts an importer's data-path process with cfg, handing it
// staging (a shared file of cfg.Staging bytes, which it maps read-write),
// and returns once its UCX is ready, or with the error that stopped it;
// Connect then connects it to the exporter's data path.
func StartImport(ctx context.Context, cfg Config, staging *os.File) (*Proc, error) {
	cfg.Import = true
	if cfg.Chunk < 1 || cfg.Depth < 1 || cfg.Staging < 1 || staging == nil || len(cfg.Bind) == 0 || len(cfg.Bind) > maxKey {
		return nil, errors.New("data path: an importer's needs a chunk, a depth, a staging file and a bind header")
	}
	return start(ctx, cfg, staging, nil)
}

func start(ctx context.Context, cfg Config, f *os.File, claims func([]byte) bool) (*Proc, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("data path: socket pair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "datapath"), os.NewFile(uintptr(fds[1]), "datapath-child")
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("data path: %w", err)
	}
	p := &Proc{conn: fc.(*net.UnixConn), stderr: &tail{max: 4 << 10}, wait: map[uint64]chan message{}, imports: cfg.Import, claims: claims,
		ready: make(chan struct{}), bound: make(chan struct{}), peerFailed: make(chan struct{}), done: make(chan struct{})}
	// The binary itself, under a name of its own; none of the parent's
	// arguments and only the environment UCX and Go read: a secret passed
	// to the service in either stays out of the process.
	p.cmd = &exec.Cmd{Path: "/proc/self/exe", Args: []string{"ucxshare-datapath"}, Env: childEnv(),
		ExtraFiles: []*os.File{theirs}, Stderr: p.stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	err = spawn(p.cmd)
	theirs.Close()
	if err != nil {
		p.conn.Close()
		return nil, fmt.Errorf("data path: starting the process: %w", err)
	}
	go p.read()
	if err := p.send(message{Op: "init", Init: &cfg}, f); err != nil {
		p.Close()
		return nil, err
	}
	select {
	case <-p.ready:
		return p, nil
	case <-p.done:
		return nil, p.Err()
	case <-ctx.Done():
		p.Close()
		return nil, fmt.Errorf("data path: the process did not get ready in time: %w", ctx.Err())
	}
}

// childEnv is the environment a data-path process gets: UCX's, the
// loader's and Go's runtime variables, nothing else.
func childEnv() []string {
	env := []string{envRole + "=" + protoVersion}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "UCX_"), name == "LD_LIBRARY_PATH", name == "GORACE",
			name == "GODEBUG", name == "GOTRACEBACK", name == "GOMAXPROCS", name == "TMPDIR":
			env = append(env, kv)
		}
	}
	return env
}

// Port is the port of the process's UCX listener.
func (p *Proc) Port() uint16 { return p.port }

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Bound is closed once the peer's connection was claimed by its token.
func (p *Proc) Bound() <-chan struct{} { return p.bound }

// PeerFailed is closed when the bound peer's endpoint failed.
func (p *Proc) PeerFailed() <-chan struct{} { return p.peerFailed }

// Done is closed once the process has ended and was reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err says how the process ended (nil while it runs).
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Map hands the process a shared file to map (size bytes, read-only
// unless writable), and to register and pack the first length bytes of
// for the peer as generation gen, with remote write if writable and remote
// read if readable (a key's protection, which only transports that check
// keys in hardware enforce: the mapping itself is readable). It returns
// the address of the mapping in the process and the packed region.
func (p *Proc) Map(ctx context.Context, gen uint64, f *os.File, size, length int, writable, readable bool) (uint64, []byte, error) {
	r, err := p.call(ctx, message{Op: "map", Gen: gen, Size: uint64(size), Len: uint64(length), Write: writable, NoRead: !readable}, f, "mapped")
	if err != nil {
		return 0, nil, err
	}
	if r.Gen != gen || r.Addr == 0 || len(r.Key) == 0 {
		p.kill()
		return 0, nil, fmt.Errorf("data path: a malformed answer to map (generation %d, address %#x, %d key bytes)", r.Gen, r.Addr, len(r.Key))
	}
	return r.Addr, r.Key, nil
}

// Unmap has the process deregister and unmap generation gen; its address
// range stays reserved, inaccessible, for the process's life. Once it
// returns nil, or the process ended, the process maps none of it.
func (p *Proc) Unmap(ctx context.Context, gen uint64) error {
	r, err := p.call(ctx, message{Op: "unmap", Gen: gen}, nil, "unmapped")
	if err == nil && r.Gen != gen {
		p.kill()
		err = fmt.Errorf("data path: an answer to unmap %d names generation %d", gen, r.Gen)
	}
	return err
}

// Connect has an importer's data path connect to the exporter's at addr
// (on cfg.Peer), send the bind claim and complete the wire-up; it returns
// the local ports of the process's tcp connections with that host (for
// the exporter's data path's Keep).
func (p *Proc) Connect(ctx context.Context, addr netip.AddrPort) ([]uint16, error) {
	r, err := p.call(ctx, message{Op: "connect", Peer: addr.String()}, nil, "connected")
	return r.Ports, err
}

// Keep has an exporter's data path (bound) shut down every tcp
// connection with its peer's host whose port there is not one of ports.
func (p *Proc) Keep(ctx context.Context, ports []uint16) error {
	_, err := p.call(ctx, message{Op: "keep", Ports: ports}, nil, "kept")
	return err
}

// Unpack has an importer's data path unpack key, the exporter's packed
// region of generation gen, and returns the address and length the
// packed region names (the caller checks them against its grant).
func (p *Proc) Unpack(ctx context.Context, gen uint64, key []byte) (addr, length uint64, err error) {
	if len(key) == 0 || len(key) > maxKey {
		return 0, 0, fmt.Errorf("data path: a key of %d bytes (1 to %d)", len(key), maxKey)
	}
	r, err := p.call(ctx, message{Op: "unpack", Gen: gen, Key: key}, nil, "unpacked")
	if err == nil && r.Gen != gen {
		p.kill()
		err = fmt.Errorf("data path: an answer to unpack %d names generation %d", gen, r.Gen)
	}
	return r.Addr, r.Len, err
}

// Drop has an importer's data path flush what it wrote through generation
// gen and release its key; the error is the flush's.
func (p *Proc) Drop(ctx context.Context, gen uint64) error {
	r, err := p.call(ctx, message{Op: "drop", Gen: gen}, nil, "dropped")
	if err == nil && r.Gen != gen {
		p.kill()
		err = fmt.Errorf("data path: an answer to drop %d names generation %d", gen, r.Gen)
	}
	return err
}

// Move has an importer's data path move n bytes between the region of
// generation gen at off and the staging file at soff (a write: from the
// staging file into the region, then flushed). It returns at once; Wait
// waits for the move.
func (p *Proc) Move(gen uint64, write bool, off, soff, n int) *Move {
	op := "get"
	if write {
		op = "put"
	}
	return p.async(message{Op: op, Gen: gen, Off: uint64(off), SOff: uint64(soff), Len: uint64(n)})
}

// AddBuffer hands an importer's data path f, a shared file of size bytes
// it maps read-write, and returns the buffer's id for
// MoveBuffer: moves into and out of it need no copy on the parent's side.
func (p *Proc) AddBuffer(ctx context.Context, f *os.File, size int) (uint64, error) {
	r, err := p.call(ctx, message{Op: "buffer", Size: uint64(size)}, f, "buffered")
	if err == nil && r.Buf == 0 {
		p.kill()
		err = errors.New("data path: an answer to buffer names no buffer")
	}
	return r.Buf, err
}

// DropBuffer has an importer's data path deregister and unmap buffer id;
// no move may use it then.
func (p *Proc) DropBuffer(ctx context.Context, id uint64) error {
	_, err := p.call(ctx, message{Op: "unbuffer", Buf: id}, nil, "unbuffered")
	return err
}

// MoveBuffer is Move between the region and buffer buf at boff.
func (p *Proc) MoveBuffer(gen uint64, write bool, off int, buf uint64, boff, n int) *Move {
	op := "get"
	if write {
		op = "put"
	}
	return p.async(message{Op: op, Gen: gen, Off: uint64(off), Buf: buf, SOff: uint64(boff), Len: uint64(n)})
}

// The offload side of an importer's data path. Each request returns at
// once; Wait waits for it (and a request whose Wait gave up on its ctx
// still runs to its end there).

// ConnectPeer connects the data path to a third peer's listener at addr
// (ip:port), letting the peer's host through its fence; ID names the peer.
func (p *Proc) ConnectPeer(addr string) *Move {
	return p.request(message{Op: "peer-connect", Peer: addr}, "peer")
}

// ClosePeer closes peer id's endpoint.
func (p *Proc) ClosePeer(id uint64) *Move {
	return p.request(message{Op: "peer-close", Buf: id}, "done")
}

// UnpackPeerRegion unpacks a region peer id packed (ucp.Mem.PackRegion);
// ID names it, Len is its length.
func (p *Proc) UnpackPeerRegion(peer uint64, packed []byte) *Move {
	return p.request(message{Op: "peer-unpack", Buf: peer, Key: packed}, "peer-region")
}

// ClosePeerRegion releases peer region id.
func (p *Proc) ClosePeerRegion(id uint64) *Move {
	return p.request(message{Op: "peer-region-close", Buf: id}, "done")
}

// OpenAMQueue has the data path take the active messages of id from any
// peer, and report each (OnAM).
func (p *Proc) OpenAMQueue(id uint16) *Move { return p.request(message{Op: "am-open", AM: id}, "done") }

// CloseAMQueue closes the queue of id.
func (p *Proc) CloseAMQueue(id uint16) *Move {
	return p.request(message{Op: "am-close", AM: id}, "done")
}

// DropAM drops reported message id.
func (p *Proc) DropAM(id uint64) { p.send(message{Op: "am-drop", Buf: id}, nil) }

// CopyTo copies n bytes of generation gen at off to peer region pr at
// prOff (CopyFrom: the other way), through the offload area, flushed.
func (p *Proc) CopyTo(gen uint64, off, n int, pr uint64, prOff int) *Move {
	return p.async(message{Op: "copy-to", Gen: gen, Off: uint64(off), Len: uint64(n), Buf: pr, SOff: uint64(prOff)})
}

// CopyFrom is CopyTo from the peer's region into the exporter's.
func (p *Proc) CopyFrom(gen uint64, off, n int, pr uint64, prOff int) *Move {
	return p.async(message{Op: "copy-from", Gen: gen, Off: uint64(off), Len: uint64(n), Buf: pr, SOff: uint64(prOff)})
}

// SendAM sends n bytes of generation gen at off to peer as one rendezvous
// active message id with header.
func (p *Proc) SendAM(gen uint64, off, n int, peer uint64, id uint16, header []byte) *Move {
	return p.async(message{Op: "send-am", Gen: gen, Off: uint64(off), Len: uint64(n), Buf: peer, AM: id, Key: header})
}

// ReceiveAM receives reported message msg (n bytes) into generation gen
// at off, flushed.
func (p *Proc) ReceiveAM(gen uint64, off, n int, msg uint64) *Move {
	return p.async(message{Op: "am-receive", Gen: gen, Off: uint64(off), Len: uint64(n), Buf: msg})
}

// AM is an active message a peer sent the data path, reported (OnAM).
type AM struct {
	ID     uint64 // the data path's, for ReceiveAM and DropAM
	AMID   uint16
	Header []byte
	Data   []byte // an eager message's
	Len    int
	Rndv   bool
}

// OnAM sets what is told of each active message a queue takes; it runs
// in the process's reader and must not block.
func (p *Proc) OnAM(f func(AM)) {
	p.mu.Lock()
	p.onAM = f
	p.mu.Unlock()
}

// Cancel asks the data path to start no more operations of mv; Wait then
// returns soon, with the bytes moved in order so far (Done).
func (p *Proc) Cancel(mv *Move) {
	p.send(message{Op: "cancel", Seq: mv.seq}, nil)
}

// Flush has an importer's data path flush what it wrote through
// generation gen: once Wait returned nil, the moves into it that ended
// before are in the exporter's memory.
func (p *Proc) Flush(gen uint64) *Move {
	return p.async(message{Op: "flush", Gen: gen})
}

func (p *Proc) async(m message) *Move { return p.request(m, "moved") }

func (p *Proc) request(m message, want string) *Move {
	mv := &Move{p: p, ch: make(chan message, 1), want: want}
	p.mu.Lock()
	p.seq++
	mv.seq = p.seq
	p.wait[mv.seq] = mv.ch
	p.mu.Unlock()
	m.Seq = mv.seq
	mv.err = p.send(m, nil)
	return mv
}

// Move is a move (or flush, or another request) in flight in an
// importer's data path.
type Move struct {
	p     *Proc
	seq   uint64
	ch    chan message
	want  string // the answer that completes it ("moved" unless said)
	ans   message
	err   error
	done  bool
	moved uint64
}

// ID is the id the answer named (a peer's, a peer region's), after Wait.
func (mv *Move) ID() uint64 { return mv.ans.Buf }

// Len is the length the answer named (a peer region's), after Wait.
func (mv *Move) Len() int { return int(mv.ans.Len) }

// Done is how many bytes of the move completed in order (after Wait).
func (mv *Move) Done() int { return int(mv.moved) }

// Wait waits for the move until ctx ends (then it is still in flight:
// the staging bytes are the data path's until it ends, or the process
// does). After it returned other than for ctx, the move is over.
func (mv *Move) Wait(ctx context.Context) error {
	if mv.done {
		return mv.err
	}
	if mv.err == nil {
		select {
		case r := <-mv.ch:
			mv.moved = r.Len
			want := mv.want
			if want == "" {
				want = "moved"
			}
			switch r.Op {
			case want:
				mv.ans = r
			case "error":
				mv.err = answerErr("move", r)
			default:
				mv.p.kill()
				mv.err = fmt.Errorf("data path: a %q answer to a move", r.Op)
			}
		case <-mv.p.done:
			mv.err = mv.p.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mv.done = true
	mv.p.mu.Lock()
	delete(mv.p.wait, mv.seq)
	mv.p.mu.Unlock()
	return mv.err
}

// Close ends the process (SIGKILL: it holds nothing to save) and waits
// until it was reaped; after Close returns, nothing it mapped is mapped
// anywhere but in this process. Safe to call more than once.
func (p *Proc) Close() error {
	p.kill()
	<-p.done
	return nil
}

func (p *Proc) kill() {
	p.killOnce.Do(func() {
		p.cmd.Process.Kill()
		p.conn.Close()
	})
}

// expect numbers m and files a waiter for its answer: ch receives it, and
// forget drops the waiter (an answer after that is a protocol error).
func (p *Proc) expect(m *message) (ch chan message, forget func()) {
	ch = make(chan message, 1)
	p.mu.Lock()
	p.seq++
	m.Seq = p.seq
	p.wait[m.Seq] = ch
	p.mu.Unlock()
	seq := m.Seq
	return ch, func() {
		p.mu.Lock()
		delete(p.wait, seq)
		p.mu.Unlock()
	}
}

// call sends m and waits for its answer (of type want, or an error).
func (p *Proc) call(ctx context.Context, m message, f *os.File, want string) (message, error) {
	ch, forget := p.expect(&m)
	defer forget()
	if err := p.send(m, f); err != nil {
		return message{}, err
	}
	select {
	case r := <-ch:
		switch r.Op {
		case want:
			return r, nil
		case "error":
			return message{}, answerErr(m.Op, r)
		}
		p.kill()
		return message{}, fmt.Errorf("data path: a %q answer to %s", r.Op, m.Op)
	case <-p.done:
		return message{}, p.Err()
	case <-ctx.Done():
		// The process did not answer in time: it is ended, so that what it
		// maps is unmapped all the same.
		p.Close()
		return message{}, fmt.Errorf("data path: no answer to %s in time (the process was ended): %w", m.Op, ctx.Err())
	}
}

func (p *Proc) send(m message, f *os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if f != nil {
		oob = syscall.UnixRights(int(f.Fd()))
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := p.conn.WriteMsgUnix(b, oob, nil); err != nil {
		p.kill()
		return fmt.Errorf("data path: sending %s: %w", m.Op, err)
	}
	return nil
}

// read takes the process's messages until its socket ends, then reaps it.
func (p *Proc) read() {
	buf := make([]byte, maxMessage+1)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	var why error
	for why == nil {
		n, oobn, flags, _, err := p.conn.ReadMsgUnix(buf, oob)
		switch {
		case err != nil:
			why = err
		case n == 0:
			why = errEnd
		case oobn != 0 || flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 || n > maxMessage:
			why = fmt.Errorf("a message of %d bytes with %d control bytes (flags %#x)", n, oobn, flags)
			if oobn != 0 {
				closeRights(oob[:oobn])
			}
		default:
			why = p.dispatch(buf[:n])
		}
	}
	p.kill()
	werr := p.cmd.Wait()
	msg := "the data path process ended"
	if werr != nil {
		msg += " (" + werr.Error() + ")"
	}
	if s := p.stderr.lastLine(); s != "" {
		msg += ": " + s
	}
	if why != errEnd && !errors.Is(why, net.ErrClosed) && !errors.Is(why, syscall.ECONNRESET) && !errors.Is(why, io.EOF) {
		msg += "; its socket: " + why.Error()
	}
	p.err = errors.New(msg)
	close(p.done)
}

// errEnd: the process closed its socket (it exited).
var errEnd = errors.New("end of stream")

// dispatch checks one message of the process's and passes it on; an error
// ends the process.
func (p *Proc) dispatch(b []byte) error {
	var m message
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return fmt.Errorf("a malformed message: %w", err)
	}
	if m.Init != nil || len(m.Key) > maxKey || len(m.Err) > maxErr || len(m.Ports) > 256 {
		return fmt.Errorf("a %q message out of bounds", m.Op)
	}
	switch m.Op {
	case "ready":
		select {
		case <-p.ready:
			return errors.New("a second ready")
		default:
		}
		if (m.Port == 0) != p.imports {
			return fmt.Errorf("a ready with port %d", m.Port)
		}
		p.port = m.Port
		close(p.ready)
		return nil
	case "claim":
		// A connection from the peer's host sent a bind message: its
		// header must be the proof the importer sealed.
		p.nclaims++
		if p.imports || len(m.Key) == 0 || p.nclaims > maxClaims {
			return fmt.Errorf("claim %d (%d header bytes)", p.nclaims, len(m.Key))
		}
		answer := "claim-refused"
		if p.claims(m.Key) {
			answer = "claim-accepted"
		}
		go p.send(message{Op: answer, Seq: m.Seq}, nil)
		return nil
	case "bound":
		p.boundOnce.Do(func() { close(p.bound) })
		return nil
	case "peer-failed":
		p.failOnce.Do(func() { close(p.peerFailed) })
		return nil
	case "am":
		if !p.imports || len(m.Data) > maxMessage || m.Len > 1<<40 {
			return fmt.Errorf("an active message report out of bounds")
		}
		p.mu.Lock()
		f := p.onAM
		p.mu.Unlock()
		if f == nil {
			go p.DropAM(m.Buf)
			return nil
		}
		f(AM{ID: m.Buf, AMID: m.AM, Header: m.Key, Data: m.Data, Len: int(m.Len), Rndv: m.Rndv})
		return nil
	case "mapped", "unmapped", "unpacked", "dropped", "moved", "buffered", "unbuffered", "peer", "peer-region", "done", "connected", "kept", "atomic-done", "error":
		p.mu.Lock()
		ch := p.wait[m.Seq]
		p.mu.Unlock()
		if ch == nil {
			return fmt.Errorf("an answer %q to no request (%d)", m.Op, m.Seq)
		}
		select {
		case ch <- m:
			return nil
		default:
			return fmt.Errorf("a second answer to request %d", m.Seq)
		}
	}
	return fmt.Errorf("an unknown message %q", m.Op)
}

// closeRights closes the descriptors a control message carries.
func closeRights(oob []byte) {
	for _, fd := range rights(oob) {
		syscall.Close(fd)
	}
}

// rights is the descriptors a control message carries (SCM_RIGHTS).
func rights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// tail keeps the last bytes written to it (the process's stderr).
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// lastLine is the first line of the last report the process printed: a Go
// panic or fatal signal's first line, or UCX's last line.
func (t *tail) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.HasPrefix(l, "SIGSEGV") || strings.HasPrefix(l, "signal ") || strings.HasPrefix(l, "unexpected fault") {
			return strings.TrimSpace(l)
		}
	}
	if len(lines) > 0 {
		l := strings.TrimSpace(lines[len(lines)-1])
		if len(l) > 200 {
			l = l[:200]
		}
		return l
	}
	return ""
}

// spawn starts cmd from the spawner: one goroutine locked to its OS
// thread for the life of the process. A data-path process gets SIGKILL
// when its parent dies (Pdeathsig), and Linux sends it when the thread
// that forked it ends, not the process: a child forked from a thread the
// Go runtime later ends (as it ends the thread of a goroutine that exits
// locked to it) would be killed with its parent alive. The spawner's
// thread never ends.
func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd, done}
	return <-done
}

var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}
