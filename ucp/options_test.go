package ucp_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// TestListenOnEveryAddress: ":0", as with net.Listen, listens on every
// IPv4 address at a free port, which a client reaches through loopback.
func TestListenOnEveryAddress(t *testing.T) {
	p := newPair(t, unconnected())
	client := p.client
	l, err := p.server.Listen(":0")
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, netip.IPv4Unspecified(), l.Addr().Addr())
	require.NotZero(t, l.Addr().Port())

	runWorker(t, client) // the server's flush needs the client progressed
	accepted := acceptOne(t, p.server, l)
	ep, err := client.Connect(waitCtx(t), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), l.Addr().Port()).String())
	require.NoError(t, err)
	defer closeEP(t, ep)
	sep := accepted()
	defer closeEP(t, sep)
	require.NoError(t, sep.Flush(waitCtx(t)))
}

// TestAddressesChecked: what Listen and Connect cannot use is refused with
// ucs.ErrInvalidAddr and a reason, before UCX sees it.
func TestAddressesChecked(t *testing.T) {
	ctx := newContext(t)
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	defer w.Close()
	for _, tc := range []struct {
		listen bool
		addr   string
		reason string
	}{
		{true, "localhost:0", "not an IP address"},
		{false, "localhost:80", "not an IP address"},
		{false, "127.0.0.1:0", "port 0"},
		{true, "127.0.0.1:65536", "not a number from 0 to 65535"},
		{false, "[fe80::1%lo]:1", "zone"},
		{true, "127.0.0.1", "missing port"},
	} {
		var err error
		if tc.listen {
			var l *ucp.Listener
			l, err = w.Listen(tc.addr)
			assert.Nil(t, l, tc.addr)
		} else {
			var ep *ucp.Endpoint
			ep, err = w.Connect(context.Background(), tc.addr)
			assert.Nil(t, ep, tc.addr)
		}
		assert.ErrorIs(t, err, ucs.ErrInvalidAddr, tc.addr)
		assert.ErrorContains(t, err, tc.reason, tc.addr)
	}
}

// TestMapOptionsChecked: a memory type the loaded UCX lacks, or protection
// bits no Prot has, are refused before UCX maps anything.
func TestMapOptionsChecked(t *testing.T) {
	ctx := newContext(t)
	_, err := ctx.Allocate(4096, ucp.WithMemoryType(200))
	assert.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.ErrorContains(t, err, "memory type type200")
	_, err = ctx.Register(make([]byte, 4096), ucp.WithProt(0x4))
	assert.ErrorIs(t, err, ucs.ErrInvalidParam)
	assert.ErrorContains(t, err, "protection 0x4")
	m, err := ctx.Allocate(4096, ucp.WithMemoryType(ucs.MemoryHost), ucp.WithProt(ucp.ProtLocalRead|ucp.ProtRemoteRead))
	require.NoError(t, err)
	require.NoError(t, m.Close())
}

// TestConfigNameChecked: the environment variable's name given whole is
// refused (UCX would ignore it, logging only a warning), and a wrong value
// for a UCP option names the option.
func TestConfigNameChecked(t *testing.T) {
	_, err := ucp.NewContext(ucp.WithConfig("", "tcp"))
	assert.ErrorContains(t, err, "empty config name")
	for _, name := range []string{"UCX_TLS", "ucx_tls"} {
		ctx, err := ucp.NewContext(ucp.WithConfig(name, "tcp"))
		assert.Nil(t, ctx)
		assert.ErrorIs(t, err, ucs.ErrInvalidParam, name)
		assert.ErrorContains(t, err, "without the UCX_ prefix", name)
	}
	ctx, err := ucp.NewContext(ucp.WithConfig("RNDV_THRESH", "lots"))
	assert.Nil(t, ctx)
	assert.ErrorContains(t, err, `config RNDV_THRESH="lots"`)
}

// TestListenOnAddressInUse says why.
func TestListenOnAddressInUse(t *testing.T) {
	p := newPair(t, listening(), unconnected())
	_, err := p.server.Listen(p.listener.Addr().String())
	assert.ErrorIs(t, err, ucs.ErrBusy)
	assert.ErrorContains(t, err, "the address is in use")
}
