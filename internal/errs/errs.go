// Package errs builds the *ucs.Error values packages uct and ucp return;
// applications only read them (package ucs), so the constructors live here.
package errs

import (
	"context"
	"errors"
	"fmt"

	"github.com/ucxgo/ucx/ucs"
)

// Status returns nil for ucs.OK, else an *ucs.Error for op with cause st.
// It allocates nothing on success.
func Status(st ucs.Status, op string) error {
	if st == ucs.OK {
		return nil
	}
	return &ucs.Error{Op: op, Err: st}
}

// New returns an *ucs.Error with cause err and a formatted reason.
func New(op string, err error, reason string, args ...any) *ucs.Error {
	if len(args) > 0 {
		reason = fmt.Sprintf(reason, args...)
	}
	return &ucs.Error{Op: op, Err: err, Reason: reason}
}

// Ctx is the error of op whose ctx ended (ctxErr, its Err): the cause is
// ucs.ErrCanceled when it was canceled, ucs.ErrTimedOut otherwise, and
// ctxErr is wrapped. reason may be empty.
func Ctx(op string, ctxErr error, reason string) *ucs.Error {
	cause := ucs.ErrTimedOut
	if errors.Is(ctxErr, context.Canceled) {
		cause = ucs.ErrCanceled
	}
	return &ucs.Error{Op: op, Err: cause, Reason: reason, Wrapped: ctxErr}
}
