// Package share lets a process share regions of its memory with other
// processes (typically a host with the DPU of its BlueField adapter) and
// take the access back: the exporter sends each importer a sealed grant per
// region, on a registration of the importer's own, for a lease; it can
// revoke one importer, rotate a region's keys, or stop sharing a region,
// and a region's memory is never released while an importer can still
// reach it.
//
// The exporter makes a Sealer (NewHMACSealer, the same secret on both
// sides), shareable memory (NewMemory), an Exporter (NewExporter), shares
// the memory under a name (Exporter.Add) and serves a listener on the
// host's address facing the DPU (Exporter.Serve); Exporter.Close revokes
// every importer, waits for them and unmaps. The importer dials it (Dial),
// takes a region by name (Importer.Region), reads and writes it in place
// (Region.ReadAt, WriteAt: io.ReaderAt and io.WriterAt) or changes a word
// of it atomically (Region.FetchAdd64 and the rest), learns of a
// revocation (Region.Revoked, Importer.Revoked) and closes
// (Importer.Close, which acknowledges). The package's Example runs the
// whole story in one process; the README's host and DPU pair, every error
// checked, is compiled and run by share/readme_test.go.
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
// The control connection is any net.Conn (TCP, TLS, a Unix socket). Both
// sides prove they hold the sealing secret, each over a nonce of the
// other's and the connection (the address the importer dialed; over TLS,
// keying material exported from the TLS session), the exporter first: an
// importer never sends its proof to a party without the secret, and a
// relay between the two completes no session. The exporter says nothing
// of itself (ids, UCX release, mode) before the importer's proof holds;
// then a pair of UCX releases that cannot talk is refused, with an error
// naming both, before either UCX sees the other; grants follow. Every
// field of a grant is checked when it is opened (format version, UCX
// release, exporter, session, region, protection, issue and expiry times,
// bounds) before any byte of its key reaches UCX. Revocations and
// acknowledgements travel on the same connection. Limits (WithLimits)
// bound what connections that have not authenticated, and each importer
// host, can hold. The protocol is described in docs/share-protocol.md,
// what it holds against in docs/security.md.
//
// # What a revocation guarantees
//
// An importer acknowledges a revocation after its calls on the grant
// completed, its writes were flushed to the exporter's memory and its key
// or mapping was released; later calls fail with an error wrapping
// ErrRevoked and never reach the memory. The exporter unmaps a
// registration when the importer acknowledged it, when its session ended
// (rkey mode: its data path ended first), or, when the ctx of Remove or
// Rotate ended first, without the acknowledgement: the operating system
// (rkey mode) or the hardware key (export mode) then refuses the
// importer's late access, which ends that session at most. Remove,
// Rotate, Revoke and Close return only then, with a Revocation naming
// the sessions that acknowledged, ended, or were forced.
//
// Beneath that, the operating system enforces it, whatever the importer
// sends or acknowledges (docs/security.md):
//   - No UCX worker runs in the exporter's process: UCX serves any address
//     of a process to any peer connected to one of its workers, so in
//     export mode the exporter holds a UCX context only, and in rkey mode
//     each session's data path is a process of its own (this binary,
//     re-executed), which maps only the regions granted to that importer,
//     from shared files (Memory) reopened read-only for read-only grants.
//   - A revoked generation is unmapped in that process (its range left
//     inaccessible) before Remove, Rotate or Revoke return, or the
//     process is ended; revoking a whole session, or its end, ends the
//     process. A late access faults there and ends that session only.
//   - The data path accepts connections from the importer's host only,
//     keeps the endpoint whose bind claim the exporter opens (sealed by
//     the importer: the data path holds no secret), and is bound
//     to the network device of the control connection (DevicesFacing).
//     Over tcp its sockets take segments from the importer's host only,
//     and from no one once the importer is bound. Over RDMA its UCX
//     accepts any peer, as every UCX worker's does: such a peer reaches
//     at most what that session was granted.
//   - In export mode the importer's hardware key is invalidated when the
//     exporter deregisters the generation (UCX's registration cache is
//     off, so each grant is a registration of its own).
//
// The importer's side, in rkey mode, is the same: its session's UCX runs
// in a data-path process of its own, which connects to the exporter's,
// moves bytes between the exporter's memory and a staging file it shares
// with the importer (or a Buffer, without a copy), holds no secret, and
// makes the offload calls' connections to third peers; no UCX runs in the
// importer's process.
//
// One UCX issue is not prevented: in rkey mode over tcp, an importer that
// dies (or loses its link) while its reads are in flight can make UCX
// abort the process serving it (docs/behaviour.md, "Known UCX issues
// met"): the session's data-path process, never the exporter.
//
// # Offload
//
// Importer.ConnectPeer connects to a third peer's UCX listener, and
// Peer.UnpackRegion takes a region it packed (ucp.Mem.PackRegion; a peer
// may send it as an active message, whose AMMessage.Data then holds it:
// open the queue before connecting); Importer.OpenAMQueue takes the
// active messages third peers send. Region.CopyTo, CopyFrom, SendAM
// and ReceiveAM move a region's bytes to or from such a peer, as UCX's DPU
// daemon for ucx_perftest does: in rkey mode inside the session's data
// path, through the offload area of its staging file (WithStaging
// bytes); in export mode straight from the imported mapping. One offload
// call runs at a time per session.
//
// # Events, errors and counters
//
// WithEvents sends an exporter's session events (opened, refused and why,
// acknowledged, expired, ended) to a channel the program selects on; an
// Event names the session as the importer's SessionID does.
//
// Every condition a program on this package tells apart has a name here,
// checked with one errors.Is: ErrRevoked, ErrAccess, ErrRefused, ErrSeal,
// ErrGrant, ErrProtocol, and the conditions shared with the binding
// beneath (ErrClosed, ErrTimedOut, ErrCanceled, ErrNoRegion, ErrExists,
// ErrOutOfRange, ErrBusy, ErrUnsupported, ErrInvalid, ErrReset: the same
// values as package ucs's).
//
// Exporter.Stats, Session.Stats and Importer.Stats return counters as
// structs (int64 each, documented field by field); WithExpvarName
// publishes them through package expvar in the map "ucx", beside the
// workers a program names (ucp.WithExpvarName) and "handles", the UCX
// objects the process holds. WithLogger logs each session's story (see
// there); the events of WithEvents are the same happenings for a program
// to select on.
package share
