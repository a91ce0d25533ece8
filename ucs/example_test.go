package ucs_test

import (
	"errors"
	"fmt"

	"github.com/ucxgo/ucx/ucs"
)

// Every ucx-go error is a *ucs.Error: errors.Is tests its cause, errors.As
// reads the operation and why.
func ExampleError() {
	var err error = &ucs.Error{Op: "ucp: export", Err: ucs.ErrUnsupported, Reason: "no memory domain can export keys"}
	if errors.Is(err, ucs.ErrUnsupported) {
		fmt.Println("fall back to remote keys")
	}
	var e *ucs.Error
	if errors.As(err, &e) {
		fmt.Println(e.Op)
	}
	// Output:
	// fall back to remote keys
	// ucp: export
}
