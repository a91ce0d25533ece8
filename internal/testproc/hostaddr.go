package testproc

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
)

// HostIP is the address tests listen on for another process to connect
// over the network: the first IPv4 address of an interface that is up and
// not a loopback, as a host and its DPU share a network; 127.0.0.1 when
// the machine has none. share's data path binds UCX to the device of the
// control connection, and UCX 1.20 cannot carry tcp between two processes
// over a loopback device.
var HostIP = sync.OnceValue(func() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() && ip.IsGlobalUnicast() {
					return ip.Unmap().String()
				}
			}
		}
	}
	return "127.0.0.1"
})

// HostAddr is HostIP with port 0, for net.Listen.
func HostAddr() string { return net.JoinHostPort(HostIP(), "0") }

// Children is the processes whose parent is pid, from /proc/*/stat (a
// task's children file lists only that thread's).
func Children(pid int) []int {
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(st, ')'); i > 0 {
			if f := strings.Fields(string(st[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				kids = append(kids, id)
			}
		}
	}
	return kids
}
