package ucp_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucs"
)

// What a client that is not a UCX worker sends a Listener. UCX's tcp
// connection manager reads the first 8 bytes as the little-endian length
// of what follows a 16-byte header: every probe here claims more than it
// sends, as text and TLS do (docs/behaviour.md, "Not guaranteed", for the rest).
var nonUCXProbes = map[string][]byte{
	"nothing":    nil,
	"http":       []byte("GET / HTTP/1.1\r\nHost: example\r\nUser-Agent: probe\r\n\r\n"),
	"tls hello":  append([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}, pattern(500, 9)...),
	"ssh banner": []byte("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"),
	"junk":       pattern(2048, 3),
	// A whole header claiming 2 KiB, and half of it.
	"short message": func() []byte {
		b := make([]byte, 16+1024)
		binary.LittleEndian.PutUint64(b, 2048)
		return b
	}(),
}

// TestListenerSurvivesNonUCXClients: a port scanner, a browser or a
// misdirected client of another protocol connects to a Listener, sends what
// it sends and hangs up. The Listener neither crashes nor queues a request
// for it, releases the socket when the client closes, and accepts the next
// UCX client.
func TestListenerSurvivesNonUCXClients(t *testing.T) {
	p := newPair(t, listening(), unconnected())
	server, client, l := p.server, p.client, p.listener
	fdsBefore := openFDs(t)

	for name, probe := range nonUCXProbes {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err, name)
		_, err = c.Write(probe)
		require.NoError(t, err, name)
		// Progress the listener's worker while the bytes are in, and see
		// that no request comes of them.
		wait, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		cr, err := l.AcceptRequest(wait)
		cancel()
		require.ErrorIs(t, err, ucs.ErrTimedOut, "%s: a request came: %v", name, cr)
		require.NoError(t, c.Close())
	}

	// The sockets go when the clients have closed and UCX saw it.
	require.Eventually(t, func() bool {
		server.Progress()
		return openFDs(t) <= fdsBefore
	}, 5*time.Second, 10*time.Millisecond, "UCX kept the sockets of closed clients: %d fds, %d before", openFDs(t), fdsBefore)

	runWorker(t, server)
	accepted := acceptOne(t, server, l)
	cep, err := client.Connect(waitCtx(t), l.Addr().String())
	require.NoError(t, err)
	defer closeEP(t, cep)
	sep := accepted()
	defer closeEP(t, sep)
	require.NoError(t, cep.Flush(waitCtx(t)))
}

// TestListenerKeepsLongNonUCXClients: a client that sends more than UCX's
// connection manager buffers (2 KiB and a 16-byte header, by default)
// without a length that frames it leaves its socket in UCX, which stops
// reading it and so never sees the client go, until the worker is closed,
// the listener's Close included (measured on 1.18.1 and 1.22.0): the
// docs/behaviour.md says so, this test holds it to the worker's Close.
func TestListenerKeepsLongNonUCXClients(t *testing.T) {
	p := newPair(t, listening(), unconnected())
	server, l := p.server, p.listener
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	_, err = c.Write(pattern(64<<10, 3))
	require.NoError(t, err)
	client := netip.MustParseAddrPort(c.LocalAddr().String())
	require.NoError(t, c.Close())
	wait, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = l.AcceptRequest(wait)
	require.ErrorIs(t, err, ucs.ErrTimedOut)
	assert.True(t, serverSocketOpen(t, client), "UCX released the socket: update docs/behaviour.md")
	// The listener's Close leaves it to the worker, which UCX destroys when
	// the last of its handles, here the listener, is closed.
	require.NoError(t, l.Close())
	assert.True(t, serverSocketOpen(t, client), "the listener's Close released the socket: update docs/behaviour.md")
	require.NoError(t, server.Close())
	assert.False(t, serverSocketOpen(t, client), "the worker's Close kept the socket of a gone client")
}

// serverSocketOpen tells whether this process holds a TCP socket whose
// peer is client.
func serverSocketOpen(t testing.TB, client netip.AddrPort) bool {
	b, err := os.ReadFile("/proc/self/net/tcp")
	require.NoError(t, err)
	want := fmt.Sprintf(":%04X", client.Port())
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// Field 2 is the remote address as HEX_IP:HEX_PORT; a socket in
		// TIME_WAIT (06) is the kernel's, not this process's.
		if len(f) > 3 && strings.HasSuffix(f[2], want) && f[3] != "06" && f[9] != "0" {
			return true
		}
	}
	return false
}

// TestConnectToNonUCXServer: a newcomer's Connect to the wrong port, where a
// service of another protocol answers. Connect returns at once (UCX
// connects in the background); the first wait says what went wrong: the
// peer reset the connection, or it never completed UCX's handshake.
func TestConnectToNonUCXServer(t *testing.T) {
	for _, serve := range []struct {
		name  string
		serve func(net.Conn)
		reset bool
	}{
		{"closes", func(c net.Conn) {}, true},
		{"silent", func(c net.Conn) { io.Copy(io.Discard, c) }, false},
		{"http", func(c net.Conn) {
			c.Read(make([]byte, 4096))
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			io.Copy(io.Discard, c)
		}, false},
		{"ssh banner", func(c net.Conn) {
			c.Write([]byte("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"))
			io.Copy(io.Discard, c)
		}, false},
	} {
		t.Run(serve.name, func(t *testing.T) {
			t.Parallel() // each waits for its flush to time out
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { defer c.Close(); serve.serve(c) }()
				}
			}()
			ctx := newContext(t)
			w, err := ctx.NewWorker()
			require.NoError(t, err)
			defer w.Close()
			runWorker(t, w)
			wait, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			ep, err := w.Connect(wait, ln.Addr().String())
			require.Error(t, err)
			assert.Nil(t, ep, "Connect returns no endpoint with its error (it closed it)")
			assert.ErrorContains(t, err, "ucp: connect to "+ln.Addr().String())
			if serve.reset {
				assert.ErrorIs(t, err, ucs.ErrConnectionReset)
			} else {
				assert.ErrorIs(t, err, ucs.ErrTimedOut)
				assert.ErrorContains(t, err, "is not a UCX listener")
			}
		})
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}
