package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// fence attaches a socket filter to every listening TCP socket of this
// process (UCX's tcp interfaces and its connection listener): a segment
// from any source address but peers' is dropped before TCP sees it, so no
// other host completes a connection to this process, sends it a byte or
// reaches its UCX. With no peer (or only zero ones) it drops every
// segment: no one connects any more. Connections accepted before keep
// the filter they were accepted under (a socket inherits its listener's). It returns how many sockets
// it fenced. It covers tcp only: RDMA devices are reached without a
// socket.
func fence(peers ...netip.Addr) (int, error) {
	prog := fenceProgram(peers...)
	n := 0
	var first error
	err := sockets(func(fd int) {
		if first != nil || !listeningTCP(fd) {
			return
		}
		fp := syscall.SockFprog{Len: uint16(len(prog)), Filter: unsafe.SliceData(prog)}
		_, _, errno := syscall.Syscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, syscall.SO_ATTACH_FILTER,
			uintptr(unsafe.Pointer(&fp)), unsafe.Sizeof(fp), 0)
		if errno != 0 {
			first = fmt.Errorf("attaching the peer filter to listening socket %d: %w", fd, errno)
			return
		}
		n++
	})
	if first != nil {
		return n, first
	}
	return n, err
}

// sockets calls f with each socket descriptor of this process.
func sockets(f func(fd int)) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			f(fd)
		}
	}
	return nil
}

// tcpConns calls f with each connected tcp socket of this process: its
// descriptor, its local port, its peer's address and port.
func tcpConns(f func(fd int, local uint16, peer netip.AddrPort)) {
	sockets(func(fd int) {
		if proto, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_PROTOCOL); err != nil || proto != syscall.IPPROTO_TCP {
			return
		}
		sa, err := syscall.Getpeername(fd)
		if err != nil {
			return // not connected (a listener, say)
		}
		la, err := syscall.Getsockname(fd)
		if err != nil {
			return
		}
		var peer netip.AddrPort
		switch a := sa.(type) {
		case *syscall.SockaddrInet4:
			peer = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
		case *syscall.SockaddrInet6:
			peer = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
		}
		var local uint16
		switch a := la.(type) {
		case *syscall.SockaddrInet4:
			local = uint16(a.Port)
		case *syscall.SockaddrInet6:
			local = uint16(a.Port)
		}
		f(fd, local, peer)
	})
}

// localPortsWith is the local ports of this process's tcp connections
// with host.
func localPortsWith(host netip.Addr) []uint16 {
	var ports []uint16
	tcpConns(func(_ int, local uint16, peer netip.AddrPort) {
		if peer.Addr() == host.Unmap() && !slices.Contains(ports, local) {
			ports = append(ports, local)
		}
	})
	return ports
}

// cutExcept shuts down every connected tcp socket of this process with
// host whose port there is not one of ports; it returns how many.
func cutExcept(host netip.Addr, ports []uint16) int {
	n := 0
	tcpConns(func(fd int, _ uint16, peer netip.AddrPort) {
		if peer.Addr() == host.Unmap() && !slices.Contains(ports, peer.Port()) {
			syscall.Shutdown(fd, syscall.SHUT_RDWR)
			n++
		}
	})
	return n
}

// cutOthers shuts down every connected tcp socket of this process whose
// peer is not peer's host: a connection that reached one of UCX's tcp
// interfaces between the worker's creation and fence. UCX sees the
// connection end and drops what it made of it. It returns how many it cut.
func cutOthers(peer netip.Addr) int {
	n := 0
	tcpConns(func(fd int, _ uint16, from netip.AddrPort) {
		if from.Addr() != peer.Unmap() {
			syscall.Shutdown(fd, syscall.SHUT_RDWR)
			n++
		}
	})
	return n
}

func listeningTCP(fd int) bool {
	acc, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
	if err != nil || acc != 1 {
		return false
	}
	dom, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_DOMAIN)
	if err != nil || (dom != syscall.AF_INET && dom != syscall.AF_INET6) {
		return false
	}
	// TCP proper: an MPTCP socket (what Go's net.Listen makes since Go
	// 1.24) refuses socket filters with EOPNOTSUPP; UCX makes none.
	proto, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_PROTOCOL)
	return err == nil && proto == syscall.IPPROTO_TCP
}

// fenceProgram is a classic BPF program that keeps a segment whose IP
// source address is one of peers (IPv4 or IPv6) and drops any other (all,
// with no peer). It reads the IP header at the kernel's network-header
// offset (SKF_NET_OFF), since a TCP socket's filter starts at the TCP
// header.
func fenceProgram(peers ...netip.Addr) []syscall.SockFilter {
	const (
		netOff = -0x100000 // SKF_NET_OFF
		ldB    = syscall.BPF_LD | syscall.BPF_B | syscall.BPF_ABS
		ldW    = syscall.BPF_LD | syscall.BPF_W | syscall.BPF_ABS
		and    = syscall.BPF_ALU | syscall.BPF_AND | syscall.BPF_K
		jeq    = syscall.BPF_JMP | syscall.BPF_JEQ | syscall.BPF_K
		ja     = syscall.BPF_JMP | syscall.BPF_JA
		ret    = syscall.BPF_RET | syscall.BPF_K
	)
	// Instructions whose jumps name labels ("" is the next instruction),
	// resolved at the end.
	type ins struct {
		code   uint16
		k      uint32
		jt, jf string
		label  string // this instruction's
	}
	k := func(off int32) uint32 { return uint32(netOff + off) }
	var v4, v6 []netip.Addr
	for _, a := range peers {
		switch a = a.Unmap(); {
		case a.Is4():
			v4 = append(v4, a)
		case a.Is6():
			v6 = append(v6, a)
		}
	}
	p := []ins{{code: ldB, k: k(0)}, {code: and, k: 0xf0}, {code: jeq, k: 0x40, jf: "v6"}}
	if len(v4) > 0 {
		p = append(p, ins{code: ldW, k: k(12)})
		for _, a := range v4 {
			b := a.As4()
			p = append(p, ins{code: jeq, k: binary.BigEndian.Uint32(b[:]), jt: "keep"})
		}
	}
	p = append(p, ins{code: ja, jt: "drop"}, ins{code: ldB, k: k(0), label: "v6"}, ins{code: and, k: 0xf0},
		ins{code: jeq, k: 0x60, jf: "drop"})
	for i, a := range v6 {
		b := a.As16()
		next := fmt.Sprintf("v6-%d", i+1)
		for w := 0; w < 4; w++ {
			p = append(p, ins{code: ldW, k: k(8 + int32(4*w))},
				ins{code: jeq, k: binary.BigEndian.Uint32(b[4*w:]), jf: next})
		}
		p = append(p, ins{code: ja, jt: "keep"}, ins{code: ja, jt: "drop", label: next})
	}
	p = append(p, ins{code: ja, jt: "drop"}, ins{code: ret, k: 0xffffffff, label: "keep"}, ins{code: ret, k: 0, label: "drop"})
	at := map[string]int{}
	for i, x := range p {
		if x.label != "" {
			at[x.label] = i
		}
	}
	out := make([]syscall.SockFilter, len(p))
	for i, x := range p {
		f := syscall.SockFilter{Code: x.code, K: x.k}
		rel := func(l string) int {
			if l == "" {
				return 0
			}
			return at[l] - i - 1
		}
		if x.code == ja {
			f.K = uint32(rel(x.jt))
		} else if x.code == jeq {
			f.Jt, f.Jf = uint8(rel(x.jt)), uint8(rel(x.jf))
		}
		out[i] = f
	}
	return out
}
