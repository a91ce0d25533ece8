package ucp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
)

// A handler that panics: the panic reaches the goroutine whose progress
// ran it, and the worker goes on dispatching, the messages that came with
// the panicking one and later ones alike. The dispatcher used to unlock
// the worker's lock it did not hold on the way out, a fatal error
// ("sync: unlock of unlocked mutex") that no recover stops.
func TestAMHandlerPanicLeavesDispatchWorking(t *testing.T) {
	p := newPair(t, runClient())
	const id ucp.AMID = 9
	got := make(chan string, 8)
	require.NoError(t, p.server.SetAMHandler(id, func(m *ucp.AMMessage) {
		if string(m.Header) == "panic" {
			panic("handler panics")
		}
		got <- string(m.Header)
	}))
	send := func(h string) {
		req, err := p.ep.SendAM(id, []byte(h), nil, 0)
		require.NoError(t, err)
		req.Detach() // completes once the server's progress took it
	}
	// progress progresses the server until want arrives, and returns what
	// the panics recovered meanwhile.
	progress := func(want string) (recovered []any) {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			func() {
				defer func() {
					if r := recover(); r != nil {
						recovered = append(recovered, r)
					}
				}()
				p.server.Progress()
			}()
			select {
			case h := <-got:
				require.Equal(t, want, h)
				return recovered
			default:
			}
		}
		t.Fatalf("message %q not dispatched", want)
		return nil
	}

	// Sent together, they may arrive in one progress round.
	send("panic")
	send("with it")
	require.Equal(t, []any{"handler panics"}, progress("with it"))
	send("later")
	require.Empty(t, progress("later"))
}
