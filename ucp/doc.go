// Package ucp is the UCP layer of ucx-go: contexts, workers, endpoints,
// memory mapping with export and import of memory handles, remote keys,
// RMA (put/get), active messages and flush.
//
// A host exporter maps memory and exports it; a DPU importer imports the
// descriptor and drives RDMA on the host's memory:
//
//	mem, _ := ctx.Allocate(1 << 20)
//	desc, err := mem.Export() // ucs.ErrUnsupported where no MD can export
//	...
//	d, err := ucp.ParseDescriptor(desc) // validated in Go first
//	host, err := uctx.Import(d) // uctx a *Context; ctx a context.Context
//	region, err := w.LocalRegion(ctx, host) // the host's memory, by offset
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
// Close, Accept, AMQueue.Receive, UnpackRemoteKey on a new listener
// endpoint) progress the worker
// for a while (WithSpin), then sleep in Go's netpoller on the worker's event
// fd, not holding the mutex, and honour their context.Context.
// Worker.Close wakes Run and Worker.Wait, which return ucs.ErrClosed.
//
// # Progress
//
// UCX makes progress only when a worker is progressed. Put and get over
// posix, sysv and tcp are emulated with active messages and complete only
// while the worker of the side that owns the memory progresses: the owner
// (a host exporter in rkey mode) must run Worker.Run in a goroutine, or
// block in Wait, for its peers' operations to finish. Active-message
// handlers run one at a time, in the order the messages arrived, on one of
// the goroutines progressing the worker (Run, Progress, a blocking call),
// and must not block; code that waits for messages takes them from an
// AMQueue.
//
// # Errors
//
// Errors are *ucs.Error values (see package ucs); test causes with errors.Is,
// e.g. errors.Is(err, ucs.ErrUnreachable).
package ucp
