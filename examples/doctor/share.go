package main

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
)

// shareReport is what package share would do on this machine: the mode an
// exporter runs in and why, the address and network devices its data
// paths would bind for a peer, and what a peer reaching them can reach.
// Every value comes from share's public API (NewExporter and Mode,
// DevicesFacing) or is read from this machine; the containment lines
// restate docs/security.md for the mode found.
type shareReport struct {
	Requested   string   `json:"share_requested_mode"`          // the -mode flag: auto unless asked
	Mode        string   `json:"share_mode"`                    // Exporter.Mode; "" when NewExporter failed
	Reason      string   `json:"share_mode_reason"`             // Exporter.Mode's reason
	Err         string   `json:"share_error,omitempty"`         // why NewExporter failed
	Peer        string   `json:"share_peer,omitempty"`          // the -peer flag, as given
	Addr        string   `json:"share_address"`                 // this host's address the peer reaches ("" without a route)
	AddrWhy     string   `json:"share_address_reason"`          // how that address was chosen
	Devices     string   `json:"share_devices"`                 // share.DevicesFacing(Addr)
	DevicesEnv  string   `json:"ucx_net_devices_env,omitempty"` // UCX_NET_DEVICES, which share leaves as it is
	Containment []string `json:"share_containment"`
	Warnings    []string `json:"share_warnings,omitempty"`

	errShort string // Err without the memory domains' reasons, for the text (its table shows them)
}

// parseMode is the -mode flag's value as a share.Mode.
func parseMode(s string) (share.Mode, error) {
	for _, m := range []share.Mode{share.ModeAuto, share.ModeRkey, share.ModeExport} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("-mode %q: auto, rkey or export", s)
}

// shareMode makes an exporter as a program would (a random secret, the
// mode asked for), reads its Mode and closes it.
func shareMode(want share.Mode) (mode share.Mode, why string, err error) {
	secret := make([]byte, 32)
	rand.Read(secret)
	sealer, err := share.NewHMACSealer(secret)
	if err != nil {
		return 0, "", err
	}
	exp, err := share.NewExporter(sealer, share.WithMode(want))
	if err != nil {
		return 0, "", err
	}
	mode, why = exp.Mode()
	return mode, why, exp.Close()
}

// chooseAddr is this host's address that share's data paths bind for a
// session with peer: the one the kernel sends from toward peer (peer may
// be an address of this host: then that address). Without a peer, the
// address of the default route's interface, or loopback without one.
func chooseAddr(peer netip.Addr) (netip.Addr, string) {
	if peer.IsValid() {
		// A UDP socket connected to peer sends nothing; its local address
		// is the source address the routing table picks.
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, 9)))
		if err != nil {
			return netip.Addr{}, fmt.Sprintf("no route to -peer %s: %v", peer, err)
		}
		defer c.Close()
		local := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap().WithZone("")
		if local == peer.WithZone("") {
			return local, fmt.Sprintf("-peer %s is this host's own: the address the other side dials", peer)
		}
		return local, fmt.Sprintf("this host's source address toward -peer %s (routing table); share binds the address the other side dials, if another", peer)
	}
	if ifc := defaultRouteIface(); ifc != "" {
		if a := firstIPv4(ifc); a.IsValid() {
			return a, fmt.Sprintf("no -peer: the address of %s, the default route's interface", ifc)
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1}), "no -peer and no default route with an IPv4 address: loopback (a peer on this host)"
}

// defaultRouteIface is the interface of the IPv4 default route, from
// /proc/net/route ("" without one).
func defaultRouteIface() string {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		fl := strings.Fields(sc.Text())
		if len(fl) >= 8 && fl[1] == "00000000" && fl[7] == "00000000" {
			return fl[0]
		}
	}
	return ""
}

// firstIPv4 is the first global unicast IPv4 address of interface name.
func firstIPv4(name string) netip.Addr {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() && ip.IsGlobalUnicast() {
				return ip.Unmap()
			}
		}
	}
	return netip.Addr{}
}

// shareLines fills r's mode, address, devices, containment and warnings.
func shareLines(r *shareReport, want share.Mode, peer netip.Addr) {
	r.Requested = want.String()
	mode, why, err := shareMode(want)
	if err != nil {
		r.Err, r.errShort = err.Error(), err.Error()
		// Export mode unavailable: its wrapped error lists every memory
		// domain's reason, which the text's table shows already.
		var ue *ucs.Error
		if errors.As(err, &ue) && ue.Wrapped != nil && errors.Is(err, ucs.ErrUnsupported) {
			r.errShort = (&ucs.Error{Op: ue.Op, Err: ue.Err, Reason: ue.Reason}).Error() + " (the table above says why for each memory domain)"
		}
	} else {
		r.Mode, r.Reason = mode.String(), why
	}
	if peer.IsValid() {
		r.Peer = peer.String()
	}
	addr, addrWhy := chooseAddr(peer)
	r.AddrWhy = addrWhy
	if addr.IsValid() {
		r.Addr = addr.String()
		r.Devices = share.DevicesFacing(addr)
	}
	r.DevicesEnv = os.Getenv("UCX_NET_DEVICES")
	// What UCX listens on in a data path: UCX_NET_DEVICES when the
	// environment sets it (share leaves it), else share's choice.
	bound := cmp.Or(r.DevicesEnv, r.Devices)
	if strings.EqualFold(bound, "all") {
		bound = ""
	}

	if v := ucs.LoadedVersion(); r.DevicesEnv == "" && addr.IsLoopback() && v.Major == 1 && v.Minor == 20 && mode == share.ModeRkey {
		r.Warnings = append(r.Warnings, fmt.Sprintf("UCX %s cannot carry tcp between processes over a loopback device: rkey sessions on %s are refused (serve on a non-loopback address)", v, addr))
	}
	if r.Addr != "" && r.Devices == "" && r.DevicesEnv == "" {
		r.Warnings = append(r.Warnings, fmt.Sprintf("no interface holds %s: share sets no UCX_NET_DEVICES and UCX would listen on every device", addr))
	}

	switch {
	case err != nil:
		r.Containment = []string{"none: share cannot run in this mode here."}
	case mode == share.ModeExport:
		r.Containment = []string{
			"The exporter's process holds a UCX context and no worker: only its control port listens.",
			"Each importer maps the memory itself through the exported key of a registration of its own per grant, which the exporter deregisters at revocation: the hardware then refuses the key.",
			"An importer in export mode runs its UCX worker in its own process: a peer reaching that worker reaches that process (not contained yet, docs/security.md).",
		}
	default:
		on := cmp.Or(bound, "every device")
		r.Containment = []string{
			"No UCX runs in the exporter's process: only its control port listens.",
			"Each session's data path is a process of its own that maps only that session's grants (read-only ones read-only), accepts connections from the importer's host only, and ends with the session.",
			"Over tcp (" + on + "): other hosts reach nothing (their segments are dropped); the importer's host connects until the importer is bound (no grant is mapped before), then no one does; the importer reaches what it was granted, as granted.",
		}
		if rdma := rdmaPorts(bound); len(rdma) > 0 || bound == "" {
			r.Containment = append(r.Containment, "Over RDMA ("+cmp.Or(strings.Join(rdma, ","), "any RDMA device")+
				"): anyone on the link reaches at most a live session's grants and its data path's own state (no secret), and can crash that data path, which ends that session only.")
		} else {
			r.Containment = append(r.Containment, "No RDMA port on "+bound+": tcp is the data paths' only network transport.")
		}
		if s := ptraceScope(); s == "" || s == "0" {
			r.Containment = append(r.Containment, "kernel.yama.ptrace_scope is "+cmp.Or(s, "absent")+
				": a data path a peer takes over runs as this user and could read this user's other processes, the exporter included (/proc/PID/mem); 1 or more stops that.")
		}
	}
}

// rdmaPorts are the RDMA ports (DEV:PORT) of a UCX_NET_DEVICES value.
func rdmaPorts(devices string) []string {
	var out []string
	for d := range strings.SplitSeq(devices, ",") {
		if strings.Contains(d, ":") {
			out = append(out, strings.TrimSpace(d))
		}
	}
	return out
}

// ptraceScope is kernel.yama.ptrace_scope ("" without Yama).
func ptraceScope() string {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
