package ucs

import (
	"errors"

	"github.com/ucxgo/ucx/internal/handle"
)

// Go-side causes, for conditions UCX has no status for.
var (
	// ErrClosed: the handle was closed.
	ErrClosed = errors.New("use of closed handle")
	// ErrUnsupportedRelease: the loaded libucx is outside the releases
	// ucx-go runs on (OldestRelease to NewestVerifiedRelease).
	ErrUnsupportedRelease = errors.New("unsupported UCX release")
)

// Error is the error type of every ucx-go call.
type Error struct {
	Op     string // what was attempted, e.g. `uct: export mkey on md "tcp"`
	Err    error  // the cause: a Status or a Go-side sentinel
	Reason string // why, when more is known than the cause says
	// Wrapped is a second cause errors.Is also matches, e.g. the
	// context.DeadlineExceeded behind an ErrTimedOut.
	Wrapped error
}

func (e *Error) Error() string {
	msg := e.Op + ": " + e.Err.Error()
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Wrapped != nil {
		msg += " (" + e.Wrapped.Error() + ")"
	}
	return msg
}

// Unwrap returns the causes, so that errors.Is(err, ErrUnsupported) works.
func (e *Error) Unwrap() []error {
	if e.Wrapped != nil {
		return []error{e.Err, e.Wrapped}
	}
	return []error{e.Err}
}

// Status is the UCX status of the error, or OK for a Go-side cause.
func (e *Error) Status() Status {
	var s Status
	if errors.As(e.Err, &s) {
		return s
	}
	return OK
}

// LiveHandles is the number of UCX objects ucx-go holds now; 0 once every
// handle is closed (and every child of a closed parent too).
func LiveHandles() int64 { return handle.Live() }

// LeakedHandles counts handles that were garbage collected without Close;
// their UCX objects were released by a cleanup.
func LeakedHandles() int64 { return handle.Leaked() }
