package datapath

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ucxgo/ucx/internal/testproc"
)

// listenTCP listens as UCX does, on a TCP socket: Go's net.Listen makes
// an MPTCP socket where the kernel has MPTCP, and MPTCP takes no filter.
func listenTCP(addr string) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	return lc.Listen(context.Background(), "tcp", addr)
}

// hostListener is a TCP listener on this machine's network address; the
// tests that tell two sources apart skip without one.
func hostListener(t *testing.T) (net.Listener, string) {
	t.Helper()
	host := testproc.HostIP()
	if host == "127.0.0.1" {
		t.Skip("needs a non-loopback address to tell two sources apart; this machine has only 127.0.0.1")
	}
	l, err := listenTCP(net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, host
}

// connection is a connection to l from address from: the dialed end and
// the accepted one, closed when the test ends.
func connection(t *testing.T, l net.Listener, from string) (dialed, accepted net.Conn) {
	t.Helper()
	d, err := dialFrom(from, l.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	a, err := l.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return d, a
}

// dialFrom connects to addr from local address from (port 0).
func dialFrom(from, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 500 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return d.Dial("tcp", addr)
}

// accepts says whether a connection from from to l completes and carries
// a byte to l's side.
func accepts(t *testing.T, l net.Listener, from string) bool {
	t.Helper()
	c, err := dialFrom(from, l.Addr().String())
	if err != nil {
		return false
	}
	defer c.Close()
	got := make(chan bool, 1)
	go func() {
		s, err := l.Accept()
		if err != nil {
			got <- false
			return
		}
		defer s.Close()
		s.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 1)
		_, err = s.Read(b)
		got <- err == nil && b[0] == 'x'
	}()
	c.Write([]byte("x"))
	select {
	case ok := <-got:
		return ok
	case <-time.After(2 * time.Second):
		l.(*net.TCPListener).SetDeadline(time.Now()) // unblock Accept
		<-got
		l.(*net.TCPListener).SetDeadline(time.Time{})
		return false
	}
}

// The fence keeps the peer's segments and drops everyone else's, on a real
// listening socket: a connection from another source address of this
// machine never completes; after the fence closes (zero peer), no one
// connects, and a connection accepted before still carries bytes.
func TestFenceAdmitsOnlyThePeer(t *testing.T) {
	host := testproc.HostIP()
	if host == "127.0.0.1" {
		t.Skip("needs a non-loopback address to tell two sources apart; this machine has only 127.0.0.1")
	}
	l, err := listenTCP(net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	defer l.Close()
	require.True(t, accepts(t, l, host), "before the fence")
	require.True(t, accepts(t, l, "127.0.0.1"), "before the fence, from another source (the control)")

	n, err := fence(netip.MustParseAddr(host))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 1)
	assert.True(t, accepts(t, l, host), "the peer")
	assert.False(t, accepts(t, l, "127.0.0.1"), "another source")

	kept, err := dialFrom(host, l.Addr().String())
	require.NoError(t, err)
	defer kept.Close()
	s, err := l.Accept()
	require.NoError(t, err)
	defer s.Close()

	_, err = fence()
	require.NoError(t, err)
	assert.False(t, accepts(t, l, host), "the peer, once closed")
	_, err = kept.Write([]byte("y"))
	require.NoError(t, err)
	s.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 1)
	_, err = s.Read(b)
	require.NoError(t, err, "a connection accepted before the close carries bytes")
	assert.Equal(t, byte('y'), b[0])
}

// The same over IPv6 loopback: the peer ::1 connects; after the close it
// does not.
func TestFenceIPv6(t *testing.T) {
	l, err := listenTCP("[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer l.Close()
	_, err = fence(netip.MustParseAddr("::1"))
	require.NoError(t, err)
	assert.True(t, accepts(t, l, "::1"))
	_, err = fence(netip.MustParseAddr("::2"))
	require.NoError(t, err)
	assert.False(t, accepts(t, l, "::1"), "a peer other than ::1 named")
}

// A connection from another host that arrived before the fence is cut:
// its other end reads the end of the stream; the peer's stays.
func TestCutOthers(t *testing.T) {
	l, host := hostListener(t)
	other, _ := connection(t, l, "127.0.0.1")
	peer, b := connection(t, l, host)

	assert.GreaterOrEqual(t, cutOthers(netip.MustParseAddr(host)), 1)
	other.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := other.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the other host's connection is cut")
	_, err = peer.Write([]byte("z"))
	require.NoError(t, err)
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, 1)
	_, err = b.Read(got)
	require.NoError(t, err, "the peer's connection stays")
	assert.Equal(t, byte('z'), got[0])
}

// A fence of several peers keeps each of them, and drops the others.
func TestFenceSeveralPeers(t *testing.T) {
	l, host := hostListener(t)
	_, err := fence(netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr(host), netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	assert.True(t, accepts(t, l, host))
	assert.True(t, accepts(t, l, "127.0.0.1"))
	_, err = fence(netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	assert.False(t, accepts(t, l, host), "a source no longer named")
	assert.True(t, accepts(t, l, "127.0.0.1"))
}

// The data ports: of two connections from the peer's host, the one whose
// port is listed stays, the other is cut; localPortsWith lists this
// process's side of them.
func TestCutExcept(t *testing.T) {
	l, host := hostListener(t)
	keep, a := connection(t, l, host)
	_, b := connection(t, l, host)
	keepPort := uint16(keep.LocalAddr().(*net.TCPAddr).Port)
	assert.Contains(t, localPortsWith(netip.MustParseAddr(host)), keepPort)

	// This process holds both ends: the accepted sockets' peers are the
	// dialed ones' ports, and the dialed ones' peer is the listener's.
	listenPort := uint16(l.Addr().(*net.TCPAddr).Port)
	n := cutExcept(netip.MustParseAddr(host), []uint16{keepPort, listenPort})
	assert.Equal(t, 1, n, "the accepted end of the other connection")
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := b.Read(make([]byte, 1))
	assert.Error(t, err, "the cut connection ends")
	_, err = keep.Write([]byte("k"))
	require.NoError(t, err)
	a.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, 1)
	_, err = a.Read(got)
	require.NoError(t, err, "the listed connection stays")
	assert.Equal(t, byte('k'), got[0])
}
