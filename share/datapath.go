package share

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ucxgo/ucx/internal/datapath"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// startDataPath starts the session's data-path process (rkey mode): it
// listens on the control connection's local address, accepts the
// importer's host only, and keeps the endpoint whose bind message carries
// the importer's sealed claim (bindMessage), which this process judges.
func (s *Session) startDataPath(ctx context.Context) (*datapath.Proc, error) {
	const op = "share: session data path"
	local, peer, err := dataHosts(s.conn)
	if err != nil {
		return nil, err
	}
	cfg := datapath.Config{Name: "ucxshare-exporter-" + strconv.FormatUint(s.id, 10), Listen: local,
		Peer: peer, AMBind: uint16(amBind), AMAtomic: uint16(amAtomic), UCX: s.e.ucxConfig()}
	if !configures(cfg.UCX, "NET_DEVICES") {
		if err := loopbackUsable(local, ucs.LoadedVersion()); err != nil {
			return nil, err
		}
		if dev := DevicesFacing(local); dev != "" {
			cfg.UCX = append([][2]string{{"NET_DEVICES", dev}}, cfg.UCX...)
		}
	}
	// The importer's bind message carries its sealed claim; the data path
	// holds no secret and asks here.
	want := bindMessage(s.t3)
	claims := func(header []byte) bool { return checkSealed(s.e.sealer, header, want) }
	dp, err := datapath.Start(ctx, cfg, claims)
	if err != nil {
		return nil, &ucs.Error{Op: op, Err: ucs.ErrIOError, Wrapped: err}
	}
	s.e.lg.dataPath(dp, s.sessionAttr(), s.remoteAttr())
	return dp, nil
}

// dataHosts are the IP addresses of this side and of the peer that a
// session's data paths use: the control connection's, or for a Unix
// socket (the peer is on this host) the loopback address on both sides.
func dataHosts(conn net.Conn) (local, peer netip.Addr, err error) {
	const op = "share: session data path"
	if conn.LocalAddr() != nil && conn.LocalAddr().Network() == "unix" {
		lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
		return lo, lo, nil
	}
	l, err := netip.ParseAddrPort(addrString(conn.LocalAddr()))
	if err == nil {
		var r netip.AddrPort
		if r, err = netip.ParseAddrPort(addrString(conn.RemoteAddr())); err == nil {
			return l.Addr().Unmap(), r.Addr().Unmap(), nil
		}
	}
	return netip.Addr{}, netip.Addr{}, &ucs.Error{Op: op, Err: ucs.ErrInvalidParam,
		Reason: "rkey mode needs a TCP (or TLS over TCP) or Unix-socket control connection; its addresses are " +
			addrString(conn.LocalAddr()) + " and " + addrString(conn.RemoteAddr()), Wrapped: err}
}

// loopbackUsable refuses a data path bound to a loopback device on UCX
// 1.20: its tcp transport takes a loopback peer's device address (which
// holds a namespace id, not an IP address) for an address to route to,
// finds no route, and so no lane reaches the peer (read in 1.20.1's
// tcp_iface.c, fixed in 1.21.0; measured: every session over 127.0.0.1
// failed its wire-up with "Destination is unreachable").
func loopbackUsable(a netip.Addr, v ucs.Version) error {
	if !a.Unmap().IsLoopback() || v.Major != 1 || v.Minor != 20 {
		return nil
	}
	return &ucs.Error{Op: "share: session data path", Err: ucs.ErrUnsupported,
		Reason: "UCX " + v.String() + " cannot carry tcp between two processes over a loopback device (fixed in 1.21): serve on a non-loopback address"}
}

// mapInDataPath has the session's data-path process map g's region,
// read-only unless the region is writable, and returns the address there
// and the packed region.
func (s *Session) mapInDataPath(g *generation) (uint64, []byte, error) {
	const op = "share: grant"
	writable := g.r.prot&ucp.ProtRemoteWrite != 0
	f, err := g.r.f.Open(writable)
	if err != nil {
		return 0, nil, &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "reopening the region's shared file", Wrapped: err}
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), s.e.o.ack)
	defer cancel()
	addr, key, err := s.dp.Map(ctx, g.gen, f, g.r.f.Size(), len(g.r.f.Bytes()), writable, g.r.prot&ucp.ProtRemoteRead != 0)
	if err != nil {
		return 0, nil, &ucs.Error{Op: op, Err: ucs.ErrIOError, Reason: "the session's data path did not map region " + g.r.id, Wrapped: err}
	}
	return addr, key, nil
}

// configures says whether kv sets UCX variable name (or the environment
// does: UCX_name).
func configures(kv [][2]string, name string) bool {
	if os.Getenv("UCX_"+name) != "" {
		return true
	}
	for _, x := range kv {
		if strings.EqualFold(x[0], name) || strings.EqualFold(x[0], "UCX_"+name) {
			return true
		}
	}
	return false
}

// DevicesFacing is the UCX_NET_DEVICES value that binds UCX to the
// network device holding addr: the interface's name, and the RDMA device
// ports sysfs lists beneath it (mlx5_0:1, say), comma-separated; "" when
// no interface holds addr. The data paths of rkey mode use it, unless
// NET_DEVICES is configured (WithUCXConfig, WithUCXConfig, or
// UCX_NET_DEVICES in the environment).
func DevicesFacing(addr netip.Addr) string {
	addr = addr.Unmap()
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == addr {
				return strings.Join(append([]string{ifc.Name}, rdmaPorts(ifc.Name)...), ",")
			}
		}
	}
	return ""
}

// rdmaPorts is the RDMA device ports of network interface name, from
// sysfs (/sys/class/net/NAME/device/infiniband/DEV, port dev_port+1).
func rdmaPorts(name string) []string {
	devs, _ := filepath.Glob(filepath.Join("/sys/class/net", name, "device/infiniband/*"))
	if len(devs) == 0 {
		return nil
	}
	port := 1
	if b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "dev_port")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 256 {
			port = n + 1
		}
	}
	var out []string
	for _, d := range devs {
		out = append(out, filepath.Base(d)+":"+strconv.Itoa(port))
	}
	return out
}
