// Package ucs is ucx-go's error model and version guard, shared by packages
// uct and ucp.
//
// Every error a ucx-go call returns is an *Error carrying the operation
// that was attempted and the cause: a Status (UCX's ucs_status_t, also used
// as the sentinel errors below) or a Go-side sentinel such as ErrClosed.
// Test for a cause with errors.Is (errors.Is(err, ucs.ErrUnsupported), say);
// ExampleError shows it.
package ucs

import (
	"github.com/ucxgo/ucx/cgo"
)

// Status is UCX's ucs_status_t. Negative values are errors; a Status is
// itself an error, so the values below serve as sentinels for errors.Is.
type Status int8

// UCX status values (identical in every UCX release this binding supports).
const (
	OK                 Status = 0
	InProgress         Status = 1
	ErrNoMessage       Status = -1
	ErrNoResource      Status = -2
	ErrIOError         Status = -3
	ErrNoMemory        Status = -4
	ErrInvalidParam    Status = -5
	ErrUnreachable     Status = -6
	ErrInvalidAddr     Status = -7
	ErrNotImplemented  Status = -8
	ErrTruncated       Status = -9
	ErrNoProgress      Status = -10
	ErrBufferTooSmall  Status = -11
	ErrNoElem          Status = -12
	ErrNoDevice        Status = -14
	ErrBusy            Status = -15
	ErrCanceled        Status = -16
	ErrShmemSegment    Status = -17
	ErrAlreadyExists   Status = -18
	ErrOutOfRange      Status = -19
	ErrTimedOut        Status = -20
	ErrExceedsLimit    Status = -21
	ErrUnsupported     Status = -22
	ErrRejected        Status = -23
	ErrNotConnected    Status = -24
	ErrConnectionReset Status = -25
	ErrEndpointTimeout Status = -80
)

// String is UCX's own text for s (ucs_status_string).
func (s Status) String() string { return cgo.StatusString(cgo.Status(s)) }

// Error makes a Status usable as an error and as an errors.Is target.
func (s Status) Error() string { return s.String() }

// IsLinkFailure reports whether s is in UCX's link-failure range.
func (s Status) IsLinkFailure() bool { return s <= -40 && s >= -59 }

// IsEndpointFailure reports whether s is in UCX's endpoint-failure range.
func (s Status) IsEndpointFailure() bool { return s <= -60 && s >= -89 }
