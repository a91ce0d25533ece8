package ucp

import (
	"encoding/binary"
	"os"
	"sync"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucs"
)

// WorkerAddress is a worker's packed address, for a peer's
// Worker.ConnectWorker: UCX's address (ucp_worker_get_address) with a magic
// before it and a CRC-32C after it. Send it as is. UCX's own address has no
// length and no checksum, and UCX reads a damaged one without checking it,
// up to aborting or crashing the process (docs/behaviour.md).
type WorkerAddress []byte

// addressMagic starts every packed worker address, before its length.
const addressMagic = "UCXw"

// WorkerAddressFromUCX packs raw, the address a C peer got from
// ucp_worker_get_address, for ConnectWorker. The checksum added covers
// damage from here on, not before; ConnectWorker checks raw's format in
// either case (see ConnectWorker).
func WorkerAddressFromUCX(raw []byte) WorkerAddress {
	b := make([]byte, 0, len(addressMagic)+len(raw)+sealSize)
	return seal(append(append(b, addressMagic...), raw...))
}

// UCX is UCX's own address inside a (sharing a's bytes), for a C peer's
// ucp_ep_create; nil if a is not a packed worker address.
func (a WorkerAddress) UCX() []byte {
	raw, err := a.unpack()
	if err != nil {
		return nil
	}
	return raw
}

// unpack checks a's seal and returns UCX's address inside it.
func (a WorkerAddress) unpack() ([]byte, error) {
	return unseal(connectWorkerOp, addressMagic, "packed worker address", "Worker.PackAddress, or WorkerAddressFromUCX for a C peer's", a, 1)
}

const connectWorkerOp = "ucp: connect to worker address"

// addressPadding zeros follow the copy of a peer's address UCX reads: a
// transport reads its device or interface address at the length it
// expects, not the length the peer wrote (tcp's device address, for one,
// differs between 1.18 and 1.22), so a short last one reads these zeros,
// not whatever follows the buffer. The largest address a transport of
// 1.16 to 1.23 packs is well under this.
const addressPadding = 256

// peerAddressCopy is raw with addressPadding zeros after it.
func peerAddressCopy(raw []byte) []byte {
	return append(append(make([]byte, 0, len(raw)+addressPadding), raw...), make([]byte, addressPadding)...)
}

// localTransport is what the worker's own address says of one transport
// (by name checksum): whether it reads a device and an interface address
// (UCX hands a transport an address of length 0 as a null pointer, and tcp
// reads it anyway: SIGSEGV in ucp_ep_create, 8 runs in 10 on 1.18.1), and
// its memory domains here.
type localTransport struct {
	device, iface bool
	mds           mdSet
}

// mdSet is a set of memory-domain indices (the walk refuses 64 and more).
type mdSet uint64

func (s *mdSet) add(md int) { *s |= 1 << md }

// peerAddressChecker learns the local transports from the worker's own
// address, once.
type peerAddressChecker struct {
	once         sync.Once
	local        map[uint16]localTransport
	fifoPosix    int64  // the size of this worker's posix receive FIFO, 0 if unknown
	fifoSysv     uint64 // likewise, System V
	amSegmentMin int    // a packed key of this context fits in a segment this large
	err          error  // the worker's own address does not walk
}

// checkPeerAddress walks raw, a peer's UCX address (wire.WalkWorkerAddress),
// and refuses one that a transport of this worker would misread (see
// checkInterface), or that gives one memory-domain index to transports
// whose domains differ here: the index picks which part of the peer's keys
// a transport reads (one flipped bit gave the sysv device cma's index, and
// a put through a genuine key crashed the process, SIGSEGV, 1.18.1).
// Transports that are not here are not read, and not checked. What is here
// is learned once, from the worker's own address; where that does not walk
// (UCX_UNIFIED_MODE=y: interface entries without lengths), every peer
// address is refused. Call inside Enter.
func (w *Worker) checkPeerAddress(raw []byte) error {
	const op = connectWorkerOp
	c := &w.peerAddrs
	c.once.Do(func() {
		own, st := w.address()
		if err := errs.Status(ucs.Status(st), op); err != nil {
			c.err = err
			return
		}
		keys, err := rkeyLocalInfo()
		if err != nil {
			c.err = err
			return
		}
		c.amSegmentMin = keys.packedMax
		info, err := wire.WalkWorkerAddress(own)
		if err != nil {
			c.err = errs.New(op, ucs.ErrUnsupported, "this worker's own address does not follow UCX's worker address format (%v), so a peer's cannot be checked before UCX reads it; UCX_UNIFIED_MODE=y packs such addresses (use Worker.Connect and a Listener there)", err)
			return
		}
		c.local = map[uint16]localTransport{}
		for _, i := range info.Interfaces {
			switch i.TransportCsum {
			case csumPosix:
				if path, ok := wire.PosixFIFOPath(i.IfaceAddr); ok {
					if st, err := os.Stat(path); err == nil {
						c.fifoPosix = st.Size()
					}
				}
			case csumSysv:
				if len(i.IfaceAddr) >= 4 {
					c.fifoSysv, _ = sysvSegmentSize(binary.LittleEndian.Uint32(i.IfaceAddr))
				}
			}
			l := c.local[i.TransportCsum]
			l.device = l.device || len(i.DeviceAddr) > 0
			l.iface = l.iface || len(i.IfaceAddr) > 0
			l.mds.add(i.MDIndex)
			c.local[i.TransportCsum] = l
		}
	})
	if c.err != nil {
		return c.err
	}
	peer, err := wire.WalkWorkerAddress(raw)
	if err != nil {
		return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: %v", err)
	}
	// Per peer md index, the local domains every transport on it has.
	common := map[int]mdSet{}
	for k, i := range peer.Interfaces {
		l, here := c.local[i.TransportCsum]
		if !here {
			continue
		}
		if err := c.checkInterface(op, k, i, l); err != nil {
			return err
		}
		mds, seen := common[i.MDIndex]
		if !seen {
			mds = l.mds
		}
		if mds &= l.mds; mds == 0 {
			return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: interface %d: memory domain %d also serves a transport whose memory domain here is another, so UCX would hand one transport the other's part of the peer's keys", k, i.MDIndex)
		}
		common[i.MDIndex] = mds
	}
	return nil
}

// checkInterface checks peer interface k, of a transport here (l), for
// what that transport would misread: an empty or short address, a FIFO
// smaller than its own, and an active-message segment too small for a
// packed key of this context, which UCX asserts fits in one (ucp_ep.c,
// rkey_size <= am.max_bcopy, 1.18.1, for a seg size flipped to 0).
func (c *peerAddressChecker) checkInterface(op string, k int, i wire.AddressInterface, l localTransport) error {
	switch {
	case l.device && len(i.DeviceAddr) == 0:
		return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: interface %d: empty device address for a transport here that reads one", k)
	case l.iface && len(i.IfaceAddr) == 0:
		return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: interface %d: empty interface address for a transport here that reads one", k)
	}
	if n, fixed := ifaceAddrMin[i.TransportCsum]; fixed && len(i.IfaceAddr) < n {
		return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: interface %d: a %d-byte interface address where the transport reads %d", k, len(i.IfaceAddr), n)
	}
	if err := c.checkFIFO(op, k, i); err != nil {
		return err
	}
	if i.AMSegment >= 0 && i.AMSegment < c.amSegmentMin {
		return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: interface %d: an active-message segment of %d bytes, smaller than a remote key of this context (up to %d bytes), which UCX asserts fits in one", k, i.AMSegment, c.amSegmentMin)
	}
	return nil
}

var (
	csumPosix = wire.TransportCsum("posix")
	csumSysv  = wire.TransportCsum("sysv")
)

// ifaceAddrMin is the fixed part of the interface address some transports
// read whatever length the peer wrote (their iface_addr_len, the same in
// the 1.16 to 1.23 sources): UCX hands the transport a pointer, and a
// shorter address reads the bytes after it (a cma address cut to 1 byte
// named pid 45 and a get then aborted in process_vm_readv, 4 runs in 15,
// 1.18.1). Lengths vary by configuration elsewhere (cma appends a pid
// namespace, posix a namespace or directory, tcp's device address changed
// between releases), so only this prefix is required.
var ifaceAddrMin = map[uint16]int{
	wire.TransportCsum("tcp"):   2, // port
	wire.TransportCsum("self"):  8, // iface id
	wire.TransportCsum("cma"):   4, // pid
	wire.TransportCsum("sysv"):  8, // FIFO segment id
	wire.TransportCsum("posix"): 8, // FIFO segment id
}

// checkFIFO refuses a posix or System V interface address whose receive
// FIFO is a segment smaller than this worker's own: UCX maps the peer's
// FIFO at the local FIFO's size and writes its elements there, and a
// shorter file raised SIGBUS inside ucp_ep_create (an empty one, 1.16.0,
// 1.18.1 and 1.22.0). A segment that does not exist or cannot be read is
// left to UCX, whose attach fails cleanly.
func (c *peerAddressChecker) checkFIFO(op string, k int, i wire.AddressInterface) error {
	switch {
	case i.TransportCsum == csumPosix && c.fifoPosix > 0:
		path, ok := wire.PosixFIFOPath(i.IfaceAddr)
		if !ok {
			return nil
		}
		st, err := os.Stat(path)
		if err == nil && st.Size() < c.fifoPosix {
			return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: interface %d: posix FIFO %s of %d bytes, smaller than the %d UCX maps", k, path, st.Size(), c.fifoPosix)
		}
	case i.TransportCsum == csumSysv && c.fifoSysv > 0 && len(i.IfaceAddr) >= 4:
		id := binary.LittleEndian.Uint32(i.IfaceAddr)
		if size, ok := sysvSegmentSize(id); ok && size < c.fifoSysv {
			return errs.New(op, ucs.ErrInvalidParam, "UCX worker address: interface %d: System V FIFO segment %d of %d bytes, smaller than the %d UCX maps", k, id, size, c.fifoSysv)
		}
	}
	return nil
}
