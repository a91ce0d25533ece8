package ucp_test

import (
	"testing"

	"github.com/ucxgo/ucx/internal/zerohandle"
	"github.com/ucxgo/ucx/ucp"
)

// TestZeroValueHandles: a zero handle (a struct field never set, new(T))
// is a closed one: every method answers with an error naming its
// operation, and none panics.
func TestZeroValueHandles(t *testing.T) {
	for _, v := range []any{
		new(ucp.Context), new(ucp.Worker), new(ucp.Endpoint), new(ucp.Listener),
		new(ucp.ConnRequest), new(ucp.Mem), new(ucp.RemoteKey), new(ucp.RemoteRegion),
		new(ucp.LocalRegion), new(ucp.AMQueue), new(ucp.AMMessage), ucp.Request{},
		new(ucp.Descriptor),
	} {
		zerohandle.CallEveryMethod(t, v, "ucp: ")
	}
}
