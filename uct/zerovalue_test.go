package uct_test

import (
	"testing"

	"github.com/ucxgo/ucx/internal/zerohandle"
	"github.com/ucxgo/ucx/uct"
)

// TestZeroValueHandles: a zero or nil handle is a closed one (see ucp's).
func TestZeroValueHandles(t *testing.T) {
	for _, v := range []any{
		new(uct.Component), new(uct.MD), new(uct.Mem), new(uct.RemoteKey), new(uct.MDReport),
		(*uct.MD)(nil), (*uct.Mem)(nil), (*uct.RemoteKey)(nil),
	} {
		zerohandle.CallEveryMethod(t, v, "uct: ")
	}
}
