package ucp_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/zerohandle"
	"github.com/ucxgo/ucx/ucp"
)

// TestZeroValueHandles: a zero handle (a struct field never set, new(T))
// and a nil one (what a failed constructor returned) are closed ones:
// every method answers with an error naming its operation, and none
// panics. The value types (Request, RemoteRegion and the RemoteRegion a
// LocalRegion embeds) are called as zero values only: through a nil
// pointer Go's dereference panics before their methods run.
func TestZeroValueHandles(t *testing.T) {
	for _, v := range []any{
		new(ucp.Context), new(ucp.Worker), new(ucp.Endpoint), new(ucp.Listener),
		new(ucp.ConnRequest), new(ucp.Mem), new(ucp.RemoteKey), new(ucp.RemoteRegion),
		new(ucp.LocalRegion), new(ucp.AMQueue), new(ucp.AMMessage), ucp.Request{},
		new(ucp.Descriptor),
		(*ucp.Context)(nil), (*ucp.Worker)(nil), (*ucp.Endpoint)(nil), (*ucp.Listener)(nil),
		(*ucp.ConnRequest)(nil), (*ucp.Mem)(nil), (*ucp.RemoteKey)(nil),
		(*ucp.AMQueue)(nil), (*ucp.AMMessage)(nil), (*ucp.Descriptor)(nil),
	} {
		zerohandle.CallEveryMethod(t, v, "ucp: ")
	}
}

// TestHandMadeAMMessage: a handler can be tested without a peer, with a
// message made by hand, as AMMessage's doc says.
func TestHandMadeAMMessage(t *testing.T) {
	handler := func(m *ucp.AMMessage) ([]byte, error) {
		buf := make([]byte, m.Len())
		req, err := m.ReceiveInto(buf)
		if err != nil {
			return nil, err
		}
		return buf, req.Wait(context.Background())
	}
	got, err := handler(&ucp.AMMessage{ID: 7, Data: []byte("hello")})
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))
}
