package share

import (
	"errors"

	"github.com/ucxgo/ucx/ucs"
)

// The causes of this package's errors, for errors.Is: one check per
// condition, all of them here, so a program on this package needs neither
// ucs nor ucp to tell them apart. Every error is an *ucs.Error whose Err
// is one of these (or, rarely, another ucs.Status from UCX); its Op says
// which call failed and its Reason what was found, and never holds a
// secret, a sealed grant or a packed key.
var (
	// ErrRevoked: the exporter revoked the region (or the whole session),
	// or its lease expired. Operations started after it fail with it and
	// never reach the exporter's memory.
	ErrRevoked = errors.New("access revoked")
	// ErrRefused: the peer refused the session: another protocol version,
	// a pair of UCX releases that cannot talk, a mode one side cannot use,
	// a data path that cannot run there (on UCX 1.20, an rkey-mode session
	// over a loopback address: serve on a non-loopback one).
	ErrRefused = errors.New("session refused")
	// ErrSeal: a proof, a grant or another sealed message did not
	// authenticate under the sealing secret (the two sides hold different
	// secrets, the peer is a relay, or bytes were altered), or a secret is
	// unusable.
	ErrSeal = errors.New("authentication failed")
	// ErrGrant: an authentic grant whose fields fail a check (format,
	// release, exporter, session, protection, times, bounds).
	ErrGrant = errors.New("grant refused")
	// ErrAccess: the grant does not allow the call (a write through a
	// ReadOnly grant, a read through a WriteOnly one): nothing was moved.
	ErrAccess = errors.New("access not granted")
	// ErrProtocol: the peer sent bytes this protocol version does not
	// allow.
	ErrProtocol = errors.New("protocol violation")
)

// Conditions this package shares with the binding beneath: the same
// values as package ucs's, so errors.Is matches either name.
var (
	// ErrClosed: the Exporter, Importer, Region, Peer or Memory was closed
	// (by Close, or by the session's end).
	ErrClosed = ucs.ErrClosed
	// ErrTimedOut: a call's ctx deadline (or WithHandshakeTimeout, the ack
	// timeout) passed first; ErrCanceled: its ctx was canceled. The error
	// also wraps ctx.Err().
	ErrTimedOut error = ucs.ErrTimedOut
	ErrCanceled error = ucs.ErrCanceled
	// ErrNoRegion: no region of that id is shared (Importer.Region,
	// Exporter.Remove, Rotate).
	ErrNoRegion error = ucs.ErrNoElem
	// ErrExists: a region of that id is shared already (Exporter.Add), or a
	// name is in use (WithExpvarName).
	ErrExists error = ucs.ErrAlreadyExists
	// ErrOutOfRange: an offset or length outside a region, a buffer or the
	// staging area.
	ErrOutOfRange error = ucs.ErrOutOfRange
	// ErrBusy: a Memory still shared, or a Buffer still in use, cannot be
	// closed yet.
	ErrBusy error = ucs.ErrBusy
	// ErrUnsupported: a mode or operation this machine or its UCX cannot
	// do (WithMode(ModeExport) without a memory domain that exports, say).
	ErrUnsupported error = ucs.ErrUnsupported
	// ErrInvalid: an argument the call cannot take (nil, negative, of
	// another importer).
	ErrInvalid error = ucs.ErrInvalidParam
	// ErrReset: the peer went away or the connection broke mid-session.
	ErrReset error = ucs.ErrConnectionReset
)
