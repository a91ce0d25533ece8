package cgo

/*
#include "ucxgo/shim.h"

// ucp_ep_rkey_unpack copies what it keeps: the key may live on the Go stack.
#cgo noescape ucxgo_ep_rkey_unpack
#cgo nocallback ucxgo_ep_rkey_unpack
#cgo noescape ucxgo_ep_rkey_reader
#cgo nocallback ucxgo_ep_rkey_reader
*/
import "C"

import (
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// UCP feature bits, from UCX's header (the same in every supported
// release).
const (
	FeatureTag          = C.UCP_FEATURE_TAG
	FeatureRMA          = C.UCP_FEATURE_RMA
	FeatureAMO32        = C.UCP_FEATURE_AMO32
	FeatureAMO64        = C.UCP_FEATURE_AMO64
	FeatureWakeup       = C.UCP_FEATURE_WAKEUP
	FeatureStream       = C.UCP_FEATURE_STREAM
	FeatureAM           = C.UCP_FEATURE_AM
	FeatureExportedMemh = C.UCP_FEATURE_EXPORTED_MEMH
)

// Context is a UCP context.
type Context struct{ p C.ucp_context_h }

// ContextInfo is what ucp_context_query reports.
type ContextInfo struct {
	RequestSize, ThreadMode, MemoryTypes uint64
	Name                                 string
}

// Init creates a UCP context with features, after applying the config
// modifications kv (key, value, ...). On a failed modification, failed is
// the index of its pair.
func Init(features uint64, mtWorkersShared bool, kv []string, name string) (ctx Context, failed int, st Status) {
	var buf strings.Builder
	for _, s := range kv {
		buf.WriteString(s)
		buf.WriteByte(0)
	}
	ckv := C.CString(buf.String())
	defer C.free(unsafe.Pointer(ckv))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var failedC C.unsigned
	st = Status(C.ucxgo_ucp_init(C.uint64_t(features), boolInt(mtWorkersShared), ckv, C.unsigned(len(kv)/2), cname, &ctx.p, &failedC))
	return ctx, int(failedC), st
}

// Cleanup destroys the context and clears c: a later use of it is a nil
// dereference, not a use after free.
func (c *Context) Cleanup() { C.ucp_cleanup(c.p); c.p = nil }

// Query describes the context.
func (c Context) Query() (ContextInfo, Status) {
	var info C.ucxgo_context_info_t
	if st := Status(C.ucxgo_ucp_query(c.p, &info)); st != 0 {
		return ContextInfo{}, st
	}
	return ContextInfo{uint64(info.request_size), uint64(info.thread_mode), uint64(info.memory_types), C.GoString(&info.name[0])}, 0
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Worker is a UCP worker with the shim's queues.
type Worker struct{ p *C.ucxgo_worker_t }

// CreateWorker creates a worker with the given ucs_thread_mode_t.
func (c Context) CreateWorker(threadMode int) (Worker, Status) {
	var w Worker
	st := Status(C.ucxgo_worker_create(c.p, C.int(threadMode), &w.p))
	return w, st
}

// Destroy destroys the worker, dropping queued messages, and clears w
// (a later use of it is a nil dereference, not a use after free).
func (w *Worker) Destroy() { C.ucxgo_worker_destroy(w.p); w.p = nil }

// MaxAMHeader is the largest active-message header the worker sends.
func (w Worker) MaxAMHeader() (int, Status) {
	var n C.size_t
	st := Status(C.ucxgo_worker_max_am_header(w.p, &n))
	return int(n), st
}

// Address is the worker's packed address.
func (w Worker) Address() ([]byte, Status) {
	buf := make([]byte, 1024)
	for {
		var n C.size_t
		st := Status(C.ucxgo_worker_address(w.p, bytesPtr(buf), C.size_t(len(buf)), &n))
		if st == -11 && int(n) > len(buf) { // UCS_ERR_BUFFER_TOO_SMALL
			buf = make([]byte, int(n))
			continue
		}
		if st != 0 {
			return nil, st
		}
		return buf[:n], 0
	}
}

// Progress runs ucp_worker_progress once.
func (w Worker) Progress() uint { return uint(C.ucxgo_worker_progress(w.h())) }

// Spin progresses up to rounds times in one cgo call, ending early once req
// (if started) is done or a callback queued work (Events changed). It
// returns the sum of the rounds' counts.
func (w Worker) Spin(req Request, rounds uint) uint {
	return uint(C.ucxgo_worker_spin(w.h(), req.h(), C.unsigned(rounds)))
}

// Events is bumped by every shim callback that queued work (a message, a
// connection request, an endpoint error). Reading it is not a cgo call.
func (w Worker) Events() uint64 { return uint64(w.p.events) }

// Completions counts requests completed by UCX callbacks (not a cgo call).
func (w Worker) Completions() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&w.p.completions)))
}

// EndpointErrors counts the endpoint failures the shim recorded (not a cgo
// call); each also bumps Events.
func (w Worker) EndpointErrors() uint64 { return uint64(w.p.ep_errors) }

// AMDropped counts messages the shim could not queue (out of memory).
func (w Worker) AMDropped() uint64 { return uint64(w.p.am_dropped) }

// EventFD is the worker's event file descriptor (UCP_FEATURE_WAKEUP).
func (w Worker) EventFD() (int, Status) {
	var fd C.int
	st := Status(C.ucxgo_worker_efd(w.p, &fd))
	return int(fd), st
}

// Arm arms the event fd; UCS_ERR_BUSY means there is work to progress.
func (w Worker) Arm() Status { return Status(C.ucxgo_worker_arm(w.p)) }

// Signal wakes a thread blocked on the event fd; safe from any thread.
func (w Worker) Signal() Status { return Status(C.ucxgo_worker_signal(w.p)) }

// Flush starts a worker flush.
func (w Worker) Flush() Request { return request(C.ucxgo_worker_flush(w.p)) }

// AMHandler is a registered active-message handler.
type AMHandler struct{ p *C.ucxgo_am_handler_t }

// SetAMHandler routes messages of id into the worker's queue.
func (w Worker) SetAMHandler(id uint) (AMHandler, Status) {
	var h AMHandler
	st := Status(C.ucxgo_worker_set_am_handler(w.p, C.unsigned(id), &h.p))
	return h, st
}

// ClearAMHandler removes the handler of id.
func (w Worker) ClearAMHandler(id uint, h AMHandler) {
	C.ucxgo_worker_clear_am_handler(w.p, C.unsigned(id), h.p)
}

// CoverAMIDs sets every 16-bit id of the worker's AM handler table to no
// handler, in turn (one call per id, in C).
func (w Worker) CoverAMIDs() Status { return Status(C.ucxgo_worker_cover_am_ids(w.p)) }

// AMMessage is one received active message. Header and Data are views of
// C memory that stay valid until the next Spin, Progress or Destroy of the
// worker: copy them before that, never keep them.
type AMMessage struct {
	ID       uint
	Header   []byte
	Data     []byte // eager data; nil for rendezvous
	Length   int    // data length (also for rendezvous)
	Rndv     bool
	DataDesc unsafe.Pointer // rendezvous descriptor, C memory owned by UCX
	ReplyEP  unsafe.Pointer // C ucp_ep_h, or nil
}

// TakeAM drains the worker's message queue into out, in arrival order,
// without a cgo call: it reads and unlinks the shim's list, which the next
// Spin or Progress (or Destroy) frees. The caller holds the lock that
// serializes the worker's UCX calls, which the shim's callbacks run under.
func (w Worker) TakeAM(out []AMMessage) []AMMessage {
	head := w.p.am_head
	if head == nil {
		return out
	}
	w.p.am_head, w.p.am_tail = nil, nil
	for m := head; m != nil; m = m.next {
		msg := AMMessage{
			ID: uint(m.id), Length: int(m.length), Rndv: m.rndv != 0,
			DataDesc: m.data_desc, ReplyEP: unsafe.Pointer(m.reply_ep),
		}
		if m.header_length > 0 {
			msg.Header = unsafe.Slice((*byte)(unsafe.Pointer(m.header)), int(m.header_length))
		}
		if !msg.Rndv && m.length > 0 {
			msg.Data = unsafe.Slice((*byte)(unsafe.Pointer(m.data)), int(m.length))
		}
		out = append(out, msg)
	}
	if w.p.am_spent == nil {
		w.p.am_spent = head
	} else { // taken twice without a spin between: free the older list now
		C.ucxgo_am_msgs_free(w.p.am_spent)
		w.p.am_spent = head
	}
	return out
}

// AMRecvData receives rendezvous data into buf (or mapped memory).
func (w Worker) AMRecvData(desc unsafe.Pointer, buf unsafe.Pointer, n uintptr, memh MemHandle) Request {
	return request(C.ucxgo_am_recv_data(w.h(), desc, buf, C.size_t(n), memh.h()))
}

// AMDataRelease drops rendezvous data that will not be received.
func (w Worker) AMDataRelease(desc unsafe.Pointer) { C.ucxgo_am_data_release(w.p, desc) }

// Listener is a UCP listener with its queue of connection requests.
type Listener struct{ p *C.ucxgo_listener_t }

// Conn is a pending connection request.
type Conn struct{ p *C.ucxgo_conn_t }

// ClientAddr is the address the request came from.
func (c Conn) ClientAddr() netip.AddrPort { return fromSockaddr(&c.p.client_addr) }

// Listen creates a listener on addr; bound is the address it got. With
// refuseByClosing its rejects accept and force-close instead (for UCX 1.16
// and 1.17, whose reject aborts the process on a later connection).
func (w Worker) Listen(addr netip.AddrPort, refuseByClosing bool) (l Listener, bound netip.AddrPort, st Status) {
	sa, n := toSockaddr(addr)
	var out C.struct_sockaddr_storage
	st = Status(C.ucxgo_listener_create(w.p, (*C.struct_sockaddr)(unsafe.Pointer(&sa)), C.socklen_t(n), boolInt(refuseByClosing), &l.p, &out))
	if st != 0 {
		return l, bound, st
	}
	return l, fromSockaddr(&out), 0
}

// Close rejects the pending requests and every later one; the UCX
// listener stays until Destroy.
func (l Listener) Close() { C.ucxgo_listener_close(l.p) }

// Destroy destroys the listener, dropping pending requests, and clears l
// (a later use of it is a nil dereference, not a use after free).
func (l *Listener) Destroy() { C.ucxgo_listener_destroy(l.p); l.p = nil }

// Take pops one pending connection request.
func (l Listener) Take() (Conn, bool) {
	c := C.ucxgo_listener_take(l.p)
	return Conn{c}, c != nil
}

// Pending reports whether requests are queued (not a cgo call).
func (l Listener) Pending() bool { return l.p.head != nil }

// Reject rejects (or refuses by closing, see Listen) and frees a
// connection request.
func (l Listener) Reject(c Conn) Status { return Status(C.ucxgo_listener_reject(l.p, c.p)) }

// Endpoint is a UCP endpoint with the error its handler recorded.
type Endpoint struct{ p *C.ucxgo_ep_t }

// Handle is the C ucp_ep_h, for matching reply endpoints.
func (e Endpoint) Handle() unsafe.Pointer { return unsafe.Pointer(e.p.ep) }

// Error is the status the endpoint's error handler recorded, 0 if none
// (not a cgo call).
func (e Endpoint) Error() Status { return Status(e.p.error) }

// IsZero reports whether e is no endpoint (a state that let go of it).
func (e Endpoint) IsZero() bool { return e.p == nil }

// ConnectWorker creates an endpoint to a worker address.
func (w Worker) ConnectWorker(addr []byte, peerErr bool) (Endpoint, Status) {
	var e Endpoint
	st := Status(C.ucxgo_ep_create_addr(w.p, bytesPtr(addr), boolInt(peerErr), &e.p))
	return e, st
}

// ConnectSockaddr creates a client-server endpoint to a listener.
func (w Worker) ConnectSockaddr(addr netip.AddrPort, peerErr bool) (Endpoint, Status) {
	var e Endpoint
	sa, n := toSockaddr(addr)
	st := Status(C.ucxgo_ep_create_sockaddr(w.p, (*C.struct_sockaddr)(unsafe.Pointer(&sa)), C.socklen_t(n), boolInt(peerErr), &e.p))
	return e, st
}

// Accept creates an endpoint from a connection request (and frees it).
func (w Worker) Accept(c Conn, peerErr bool) (Endpoint, Status) {
	var e Endpoint
	st := Status(C.ucxgo_ep_create_conn(w.p, c.p, boolInt(peerErr), &e.p))
	return e, st
}

// Close starts ucp_ep_close_nbx (flush, or force).
func (e Endpoint) Close(force bool) Request { return request(C.ucxgo_ep_close(e.p, boolInt(force))) }

// Free frees the shim's endpoint record once the close completed.
func (e Endpoint) Free() { C.ucxgo_ep_free(e.p) }

// Flush starts an endpoint flush.
func (e Endpoint) Flush() Request { return request(C.ucxgo_ep_flush(e.h())) }

// MemHandle is a ucp_mem_h.
type MemHandle struct{ p C.ucp_mem_h }

// IsNil reports whether h is the null handle.
func (h MemHandle) IsNil() bool { return h.p == nil }

// MemMap maps memory: allocate, register [addr, addr+n), or import the
// exported descriptor exported (already validated by the caller).
func (c Context) MemMap(addr unsafe.Pointer, n uintptr, allocate bool, prot uint, memType int, exported []byte) (h MemHandle, base unsafe.Pointer, length uintptr, st Status) {
	r := C.ucxgo_mem_map(c.p, addr, C.size_t(n), boolInt(allocate), C.unsigned(prot), C.int(memType), bytesPtr(exported))
	if r.status != 0 {
		return MemHandle{}, nil, 0, Status(r.status)
	}
	return MemHandle{C.ucp_mem_h(r.handle)}, r.address, uintptr(r.length), 0
}

// MemUnmap unmaps a mapping.
func (c Context) MemUnmap(h MemHandle) Status { return Status(C.ucxgo_mem_unmap(c.p, h.p)) }

// packAppend runs a pack shim into dst's spare capacity, made at least
// hint bytes; when UCX needs more it grows dst to the exact size and packs
// again. It returns dst extended by the packed bytes and their number, the
// caller's next hint: with the right hint a pack costs one crossing and at
// most one allocation, and a refused pack (an export on an MD that cannot)
// allocates nothing.
func packAppend(dst []byte, hint int, pack func(out unsafe.Pointer, capacity C.size_t) C.ucxgo_result_t) ([]byte, int, Status) {
	dst = slices.Grow(dst, hint)
	spare := dst[len(dst):cap(dst)]
	r := pack(bytesPtr(spare), C.size_t(len(spare)))
	if Status(r.status) == -11 && int(r.length) > len(spare) { // UCS_ERR_BUFFER_TOO_SMALL
		dst = slices.Grow(dst, int(r.length))
		spare = dst[len(dst):cap(dst)]
		r = pack(bytesPtr(spare), C.size_t(len(spare)))
	}
	if r.status != 0 {
		return dst, 0, Status(r.status)
	}
	return dst[:len(dst)+int(r.length)], int(r.length), 0
}

// AppendExport packs h with UCP_MEMH_PACK_FLAG_EXPORT (never without: that
// aborts the process) and appends the descriptor to dst (see packAppend).
func (c Context) AppendExport(dst []byte, hint int, h MemHandle) ([]byte, int, Status) {
	return packAppend(dst, hint, func(out unsafe.Pointer, capacity C.size_t) C.ucxgo_result_t {
		return C.ucxgo_memh_export(c.p, h.p, out, capacity)
	})
}

// AppendRemoteKey packs h's remote key (ucp_rkey_pack) and appends it to dst
// (see packAppend).
func (c Context) AppendRemoteKey(dst []byte, hint int, h MemHandle) ([]byte, int, Status) {
	return packAppend(dst, hint, func(out unsafe.Pointer, capacity C.size_t) C.ucxgo_result_t {
		return C.ucxgo_rkey_pack(c.p, h.p, out, capacity)
	})
}

// Rkey is an unpacked UCP remote key.
type Rkey struct{ p C.ucp_rkey_h }

// UnpackRemoteKey unpacks a packed rkey for e.
func (e Endpoint) UnpackRemoteKey(buf []byte) (Rkey, Status) {
	r := C.ucxgo_ep_rkey_unpack(e.p, bytesPtr(buf), C.size_t(len(buf)))
	return Rkey{C.ucp_rkey_h(r.handle)}, Status(r.status)
}

// Destroy destroys the remote key and clears r: a later use of it is a nil
// dereference, not a use after free.
func (r *Rkey) Destroy() { C.ucxgo_rkey_destroy(r.p); r.p = nil }

// RkeyReader unpacks buf on e and destroys it again, reporting whether
// ucp_rkey_ptr(key, 0) gave a local address and the 8 bytes there.
func (e Endpoint) RkeyReader(buf []byte) (marker uint64, mapped bool, st Status) {
	var m C.int
	var mk C.uint64_t
	st = Status(C.ucxgo_ep_rkey_reader(e.p, bytesPtr(buf), C.size_t(len(buf)), &m, &mk))
	return uint64(mk), m != 0, st
}

// SysvSegment is a System V segment this process attached.
type SysvSegment struct {
	ID   int
	addr unsafe.Pointer
}

// NewMarkedSysvSegment makes a one-page System V segment holding marker in
// its first 8 bytes, marked for removal: it lives until Detach (or this
// process's exit) and other attaches end.
func NewMarkedSysvSegment(marker uint64) (SysvSegment, syscall.Errno) {
	var p unsafe.Pointer
	id := int(C.ucxgo_sysv_marked_segment(C.uint64_t(marker), &p))
	if id < 0 {
		return SysvSegment{}, syscall.Errno(-id)
	}
	return SysvSegment{ID: id, addr: p}, 0
}

// Detach detaches the segment (the kernel frees it at the last detach).
func (s SysvSegment) Detach() { C.ucxgo_sysv_detach(s.addr) }

// The handles as the data path's shims take them (ucp_shim.h): integers,
// which cgo does not check for Go pointers (a check per pointer argument
// costs about as much as the crossing); all are C memory.
func (w Worker) h() C.uintptr_t    { return C.uintptr_t(uintptr(unsafe.Pointer(w.p))) }
func (e Endpoint) h() C.uintptr_t  { return C.uintptr_t(uintptr(unsafe.Pointer(e.p))) }
func (m MemHandle) h() C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(m.p))) }
func (r Rkey) h() C.uintptr_t      { return C.uintptr_t(uintptr(unsafe.Pointer(r.p))) }
func (r Request) h() C.uintptr_t   { return C.uintptr_t(uintptr(r.P)) }

// Put starts ucp_put_nbx of [buf, buf+n) to raddr.
func (e Endpoint) Put(buf unsafe.Pointer, n uintptr, memh MemHandle, raddr uint64, rkey Rkey) Request {
	return request(C.ucxgo_put(e.h(), buf, C.size_t(n), memh.h(), C.uint64_t(raddr), rkey.h()))
}

// Get starts ucp_get_nbx of n bytes at raddr into buf.
func (e Endpoint) Get(buf unsafe.Pointer, n uintptr, memh MemHandle, raddr uint64, rkey Rkey) Request {
	return request(C.ucxgo_get(e.h(), buf, C.size_t(n), memh.h(), C.uint64_t(raddr), rkey.h()))
}

// The atomic operations of ucp_atomic_op_nbx the binding uses.
const (
	AtomicAdd   = C.UCP_ATOMIC_OP_ADD
	AtomicSwap  = C.UCP_ATOMIC_OP_SWAP
	AtomicCSwap = C.UCP_ATOMIC_OP_CSWAP
)

// AllocWords returns n zeroed 8-byte words of C memory, which the
// collector never frees (FreeWords does): memory UCX may touch until an
// operation completes (atomics' operands and replies, short receives'
// landing), without pinning Go memory for each.
func AllocWords(n int) unsafe.Pointer { return C.calloc(C.size_t(n), 8) }

// FreeWords frees what AllocWords returned.
func FreeWords(p unsafe.Pointer) { C.free(p) }

// Atomic starts ucp_atomic_op_nbx of one size-byte word at raddr; operand
// and reply (nil for a post), C memory, must stay valid until it completes.
func (e Endpoint) Atomic(op uint, size uintptr, operand, reply unsafe.Pointer, raddr uint64, rkey Rkey) Request {
	return request(C.ucxgo_atomic(e.h(), C.unsigned(op), C.unsigned(size), C.uintptr_t(uintptr(operand)), C.uintptr_t(uintptr(reply)), C.uint64_t(raddr), rkey.h()))
}

// TagSend starts ucp_tag_send_nbx of n bytes at buf with tag. With imm
// (here and in AMSend) it asks UCX to complete within the call or refuse
// with UCS_ERR_NO_RESOURCE having kept nothing of buf
// (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL).
func (e Endpoint) TagSend(tag uint64, buf unsafe.Pointer, n uintptr, memh MemHandle, imm bool) Request {
	return request(C.ucxgo_tag_send(e.h(), C.uint64_t(tag), buf, C.size_t(n), memh.h(), boolInt(imm)))
}

// TagRecv posts ucp_tag_recv_nbx into n bytes at buf; a receive that
// completed at once reports its length and the sender's tag.
func (w Worker) TagRecv(buf unsafe.Pointer, n uintptr, tag, mask uint64, memh MemHandle) (r Request, length, sender uint64) {
	r = request(C.ucxgo_tag_recv(w.h(), buf, C.size_t(n), C.uint64_t(tag), C.uint64_t(mask), memh.h()))
	return r, uint64(w.p.imm_len), uint64(w.p.imm_tag)
}

// TagProbe is a non-removing ucp_tag_probe_nb.
func (w Worker) TagProbe(tag, mask uint64) (ok bool, length, sender uint64) {
	ok = C.ucxgo_tag_probe(w.p, C.uint64_t(tag), C.uint64_t(mask)) != 0
	return ok, uint64(w.p.imm_len), uint64(w.p.imm_tag)
}

// StreamSend starts ucp_stream_send_nbx of n bytes at buf.
func (e Endpoint) StreamSend(buf unsafe.Pointer, n uintptr, memh MemHandle) Request {
	return request(C.ucxgo_stream_send(e.h(), buf, C.size_t(n), memh.h()))
}

// StreamRecv posts ucp_stream_recv_nbx into up to n bytes at buf (exactly
// n with waitall); one that completed at once reports its length.
func (e Endpoint) StreamRecv(buf unsafe.Pointer, n uintptr, memh MemHandle, waitall bool) (Request, uint64) {
	r := request(C.ucxgo_stream_recv(e.h(), buf, C.size_t(n), memh.h(), boolInt(waitall)))
	return r, uint64(e.p.worker.imm_len)
}

// Cancel asks UCX to cancel a request in flight (ucp_request_cancel).
func (w Worker) Cancel(r Request) { C.ucxgo_request_cancel(w.p, r.P) }

// AMSend starts ucp_am_send_nbx; the header is copied by UCX.
func (e Endpoint) AMSend(id uint, header []byte, data unsafe.Pointer, n uintptr, memh MemHandle, flags uint, imm bool) Request {
	return request(C.ucxgo_am_send(e.h(), C.unsigned(id), bytesPtr(header), C.size_t(len(header)), data, C.size_t(n), memh.h(), C.unsigned(flags), boolInt(imm)))
}

// Request is the outcome of a non-blocking call: complete (P nil, St the
// status) or in flight (P the UCP request, completion recorded in it).
type Request struct {
	P  unsafe.Pointer
	St Status
}

func request(p C.ucs_status_ptr_t) Request {
	v := uintptr(p) // read in Go: a C helper would cost a crossing per operation
	switch {
	case v == 0:
		return Request{}
	case v >= ^uintptr(99): // UCS_PTR_IS_ERR: (uintptr)UCS_ERR_LAST .. (uintptr)-1
		return Request{St: Status(int8(int64(v)))}
	}
	return Request{P: unsafe.Pointer(p)}
}

// Done reports whether an in-flight request completed (not a cgo call).
func (r Request) Done() bool {
	return atomic.LoadInt32((*int32)(unsafe.Pointer(&(*C.ucxgo_req_t)(r.P).done))) != 0
}

// Result is a completed request's status and received length.
func (r Request) Result() (Status, uint64) {
	q := (*C.ucxgo_req_t)(r.P)
	return Status(q.status), uint64(q.length)
}

// Tag is a completed tag receive's sender tag.
func (r Request) Tag() uint64 { return uint64((*C.ucxgo_req_t)(r.P).tag) }

// Release frees the request, cancelling it first if cancel and not done.
func (w Worker) Release(r Request, cancel bool) {
	C.ucxgo_request_release(w.h(), r.h(), boolInt(cancel))
}
