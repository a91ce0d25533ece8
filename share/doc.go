// Package share lets a process share regions of its memory with other
// processes (typically a host with the DPU of its BlueField adapter) and
// take the access back: the exporter sends each importer a sealed grant per
// region, on a registration of the importer's own, for a lease; it can
// revoke one importer, rotate a region's keys, or stop sharing a region,
// and a region's memory is never released while an importer can still
// reach it.
//
// The exporter side:
//
//	sealer, _ := share.NewHMACSealer(secret) // the same secret on both sides
//	exp, err := share.NewExporter(sealer, share.WithLease(time.Hour))
//	exp.Add("frames", buf, ucp.ProtRemoteRead|ucp.ProtRemoteWrite)
//	l, _ := net.Listen("tcp", ":13337")
//	go exp.Serve(l)
//	...
//	exp.Close() // revokes every importer, waits for them, unmaps
//
// The importer side:
//
//	imp, err := share.Dial(ctx, "tcp", "host:13337", sealer)
//	frames, err := imp.Region("frames")
//	n, err := frames.ReadAt(p, off) // io.ReaderAt, pipelined
//	<-imp.Revoked()                 // the exporter took it back
//	imp.Close()                     // acknowledges
//
// # Modes
//
// In export mode (ModeExport) a grant carries an exported memory-handle
// descriptor and the importer maps the exporter's memory itself: cross-GVMI
// on BlueField-2/3 and ConnectX-6 Dx or later, where a memory domain can
// export keys (uct.HaveExportedMkey). In rkey mode (ModeRkey) a grant
// carries a packed remote key and the importer reaches the memory through
// a UCX endpoint to the exporter. ModeAuto, the default, exports where it
// can and says why not otherwise (Exporter.Mode). Regions are read and
// written the same way in both modes.
//
// # The session
//
// The control connection is any net.Conn (TCP, TLS, a Unix socket): the
// importer's hello names its protocol version and UCX release; the exporter
// refuses a pair of releases that cannot talk before either UCX sees the
// other, with an error naming both; the importer proves it holds the
// sealing secret; grants follow. Every field of a grant is checked when it
// is opened (format version, UCX release, exporter, session, region,
// protection, issue and expiry times, bounds) before any byte of its key
// reaches UCX. Revocations and acknowledgements travel on the same
// connection. The protocol is described in docs/share-protocol.md.
//
// # What a revocation guarantees
//
// An importer acknowledges a revocation after its calls on the grant
// completed, its writes were flushed to the exporter's memory and its key
// or mapping was released; later calls fail with an error wrapping
// ErrRevoked and never reach the memory. The exporter unmaps a
// registration only when the importer acknowledged it, or its session
// ended and (rkey mode) its endpoint was closed by force, never on a timer
// alone; Remove, Revoke and Close return only then.
//
// Beneath that, UCX enforces different things per transport
// (docs/revocation.md, measured on UCX 1.16.0, 1.18.1 and 1.22.0):
//   - Revoking a whole session (Session.Revoke, Revoke, Close, or an
//     importer that does not acknowledge in time) closes the importer's
//     endpoint by force: from then on nothing it sends reaches the
//     exporter's memory, on every transport.
//   - Revoking one region's grant (Remove, the old grant of a Rotate, a
//     lease's expiry) while the session goes on relies on the importer on
//     tcp and shared memory: there UCX serves any address of the exporter
//     to a connected endpoint, key or not. On RDMA hardware the
//     registration is deregistered (the exporter turns UCX's registration
//     cache off so that each grant is a registration of its own), which
//     invalidates its key.
//   - Only hosts with a session in its handshake may open a data
//     connection (rkey mode), and an endpoint that does not present its
//     session's token in time is closed.
//
// One UCX issue is not prevented: in rkey mode over tcp, an importer that
// dies (or loses its link) while its reads are in flight can make UCX
// abort the exporter's process (docs/behaviour.md, "Known UCX issues
// met").
//
// # Offload
//
// Region.CopyTo, CopyFrom, SendAM and ReceiveAM move a region's bytes to
// or from a third peer reached through an endpoint of Importer.Worker: in
// export mode straight from the imported mapping, in rkey mode through a
// bounded staging buffer, as UCX's DPU daemon for ucx_perftest does.
//
// # Counters
//
// Exporter.Stats, Session.Stats and Importer.Stats return counters as
// structs; WithExpvarName and WithImporterExpvarName publish them through
// package expvar in the map "ucxshare".
package share
