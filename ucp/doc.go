// Package ucp is the UCP layer of ucx-go: contexts, workers, endpoints,
// memory mapping with export and import of memory handles, remote keys,
// RMA (put/get), active messages and flush.
//
// A host exporter maps memory (Context.Allocate, Register) and exports it
// (Mem.Export: a descriptor, or ucs.ErrUnsupported where no memory domain
// can export); a DPU importer checks the descriptor in Go
// (ParseDescriptor), imports it (Context.Import) and reaches the host's
// memory by offset (Worker.LocalRegion). Example_hostExporter and
// Example_dpuImporter show the two sides whole.
//
// Where no memory domain can export (anything but mlx5 DevX hardware), the
// same program falls back to Mem.PackRegion (the mapping's address,
// length and remote key) and Endpoint.UnpackRegion. Worker.Connect
// returns an endpoint wired up (or the wire-up's error); one from
// ConnectWorker or Listener.Accept may be used at once: UnpackRegion waits
// (within its ctx) for the endpoint's wire-up first. A RemoteRegion checks
// offsets against its length before anything reaches UCX, and is an
// io.ReaderAt and io.WriterAt. It is the one RMA surface: Put and Get
// move a slice, PutMem and GetMem a MemRange of a local mapping
// (mem.Range(off, n)), always to or from an offset of the region, so the
// local range and the remote offset cannot be swapped. (Mem.PackRemoteKey and
// Endpoint.UnpackRemoteKey move UCX's bare key, which has no length: its
// regions' bounds are then the caller's word, see RemoteKey.Region.)
//
// # UCX releases
//
// One binary runs on any UCX from 1.16 to 1.23, whichever it was built
// against: the layouts that differ between releases are chosen from the
// release loaded (ucs.LoadedVersion, ucs.ABILayout). Peers may run other
// releases; see docs/behaviour.md for which pairs UCX lets talk. A 1.19+ process
// refuses (ucs.ErrUnsupported, naming both sides) keys that a 1.16-1.18 peer
// packed with tcp or cma parts.
//
// # Ownership
//
// Every handle has an idempotent Close and follows the rule of package uct:
// Close marks the handle closed at once (its methods then return an error
// wrapping ucs.ErrClosed) and the UCX object is released when nothing
// derived from it is still open. A worker keeps its context alive, an
// endpoint or listener its worker, a mapping its context, a remote key its
// worker (not its endpoint: UCX ties keys to the worker), and a request in
// flight its worker. Handles garbage collected
// without Close are released by cleanups and counted by ucs.LeakedHandles.
// A Request is a value whose copies share one operation; one nobody waits
// for is given to the worker with Detach, or by the garbage collector once
// dropped, and the worker releases it when UCX completes it (one that never
// completes, its peer gone without peer error handling, keeps its worker).
//
// # Threads
//
// Every handle may be used from any goroutine. Each worker serializes its
// UCX calls with a mutex (goroutines move between OS threads, so UCX's
// "single" thread mode is never safe by itself); workers are created
// UCS_THREAD_MODE_SERIALIZED unless asked otherwise, and contexts share
// workers between threads (mt_workers_shared). Blocking calls (Wait, Flush,
// Close, Connect, Accept, AMQueue.Receive, UnpackRemoteKey on a new
// listener endpoint, RecvTag, RecvStream, the fetching atomics) progress
// the worker
// for a while (WithSpin), then sleep in Go's netpoller on the worker's event
// fd, not holding the mutex, and honour their context.Context.
// Worker.Close wakes Run and Worker.Wait, which return ucs.ErrClosed.
//
// # Progress
//
// UCX makes progress only when a worker is progressed. Put and get over
// tcp are emulated with active messages and complete only while the worker
// of the side that owns the memory progresses: the owner (a host exporter
// in rkey mode) must run Worker.Run in a goroutine, or block in Wait, for
// its peers' operations to finish. Over shared memory (posix, sysv, cma)
// this process reads and writes the peer's mapping itself. Active-message
// handlers run one at a time, in the order the messages arrived, on one of
// the goroutines progressing the worker (Run, Progress, a blocking call),
// and must not block; code that waits for messages takes them from an
// AMQueue.
//
// # Atomics
//
// RemoteRegion's Add32/64, FetchAdd32/64, Swap32/64 and
// CompareAndSwap32/64 act on a 4- or 8-byte word at an offset of the
// region (ucp_atomic_op_nbx). The word must lie in the region and be
// aligned to its size in the peer's address space (ucs.ErrOutOfRange,
// ucs.ErrInvalidParam otherwise). Both contexts need FeatureAMO32 or
// FeatureAMO64 (WithFeatures), and both endpoints of the pair must be made
// without peer error handling (WithPeerErrorHandling(false) on the Connect
// and on the Accept, or on both ConnectWorker calls: UCX's atomic
// protocols serve no endpoint with it, and a pair whose two sides differ
// does not connect); the binding refuses the call with ucs.ErrUnsupported,
// saying which, otherwise. Over transports without device atomics (tcp)
// the peer's worker performs them while it is progressed; over shared
// memory this process performs them in place. Values are in the byte
// order of the machine. Atomics are atomic with respect to each other on
// the same word, not to puts, gets or the peer's own loads and stores.
// Add32 and Add64 post: their Request completes locally, and the add is in
// the peer's memory once Flush returns (over tcp, a completed Add may not
// be there yet). The fetching forms wait for the old value, bounded by
// ctx; one whose ctx ends first may still happen at the peer.
//
// # Tag matching
//
// A message sent with Endpoint.SendTag and a 64-bit Tag is taken by the
// peer worker's Worker.RecvTag whose tag it matches under the receive's
// mask (the bits set in mask must be equal), in the order the messages
// were sent from one endpoint. A worker's receives take messages from
// every endpoint of the worker, so from any peer connected to it: the tag
// says nothing about who sent, and a peer's close or death does not end a
// receive (its ctx, or the worker's Close, does). The context needs
// FeatureTag. A message larger than the receive's buffer fails the receive
// with ucs.ErrTruncated (the sender's request succeeds). A message nobody
// receives yet waits in the receiving worker's memory (eager data: UCX
// bounds none of it), as the messages of any peer connected to the worker
// do; ProbeTag looks without taking.
//
// # Streams
//
// Endpoint.SendStream and RecvStream move an endpoint's bytes in order,
// without message boundaries, as a TCP connection does; the context needs
// FeatureStream. An empty send is refused (UCX aborts the receiving
// process on one). A stream receive cannot be cancelled: one whose ctx
// ends stays posted, and its buffer is written when bytes come, until the
// endpoint closes.
//
// # Errors
//
// Errors are *ucs.Error values (see package ucs); test causes with errors.Is,
// e.g. errors.Is(err, ucs.ErrUnreachable).
package ucp
