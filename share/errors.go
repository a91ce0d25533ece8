package share

import "errors"

// The causes of this package's errors, for errors.Is. Every error is an
// *ucs.Error (package ucs) whose Err is one of these, a ucs.Status from
// UCX, or ucs.ErrClosed; its Reason says what was found, and never holds
// a secret, a sealed grant or a packed key.
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
	// ErrProtocol: the peer sent bytes this protocol version does not
	// allow.
	ErrProtocol = errors.New("protocol violation")
)
