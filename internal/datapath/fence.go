package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// fence attaches a socket filter to every listening TCP socket of this
// process (UCX's tcp interfaces and its connection listener): a segment
// from any source address but peer is dropped before TCP sees it, so no
// other host completes a connection to this process, sends it a byte or
// reaches its UCX. A zero peer drops every segment: no one connects any
// more. Connections accepted before keep the filter they were accepted
// under (a socket inherits its listener's). It returns how many sockets
// it fenced. It covers tcp only: RDMA devices are reached without a
// socket.
func fence(peer netip.Addr) (int, error) {
	prog := fenceProgram(peer)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		if !listeningTCP(fd) {
			continue
		}
		fp := syscall.SockFprog{Len: uint16(len(prog)), Filter: unsafe.SliceData(prog)}
		_, _, errno := syscall.Syscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, syscall.SO_ATTACH_FILTER,
			uintptr(unsafe.Pointer(&fp)), unsafe.Sizeof(fp), 0)
		if errno != 0 {
			return n, fmt.Errorf("attaching the peer filter to listening socket %d: %w", fd, errno)
		}
		n++
	}
	return n, nil
}

// cutOthers shuts down every connected tcp socket of this process whose
// peer is not peer's host: a connection that reached one of UCX's tcp
// interfaces between the worker's creation and fence. UCX sees the
// connection end and drops what it made of it. It returns how many it cut.
func cutOthers(peer netip.Addr) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		if proto, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_PROTOCOL); err != nil || proto != syscall.IPPROTO_TCP {
			continue
		}
		sa, err := syscall.Getpeername(fd)
		if err != nil {
			continue // not connected (a listener, say)
		}
		var from netip.Addr
		switch a := sa.(type) {
		case *syscall.SockaddrInet4:
			from = netip.AddrFrom4(a.Addr)
		case *syscall.SockaddrInet6:
			from = netip.AddrFrom16(a.Addr)
		}
		if from.Unmap() != peer.Unmap() {
			syscall.Shutdown(fd, syscall.SHUT_RDWR)
			n++
		}
	}
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
// source address is peer (IPv4 or IPv6) and drops any other. It reads the
// IP header at the kernel's network-header offset (SKF_NET_OFF), since a
// TCP socket's filter starts at the TCP header.
func fenceProgram(peer netip.Addr) []syscall.SockFilter {
	const (
		netOff = -0x100000 // SKF_NET_OFF
		ldB    = syscall.BPF_LD | syscall.BPF_B | syscall.BPF_ABS
		ldW    = syscall.BPF_LD | syscall.BPF_W | syscall.BPF_ABS
		and    = syscall.BPF_ALU | syscall.BPF_AND | syscall.BPF_K
		jeq    = syscall.BPF_JMP | syscall.BPF_JEQ | syscall.BPF_K
		ret    = syscall.BPF_RET | syscall.BPF_K
	)
	k := func(off int32) uint32 { return uint32(netOff + off) }
	drop := []syscall.SockFilter{{Code: ret, K: 0}}
	if !peer.IsValid() {
		return drop
	}
	peer = peer.Unmap()
	var words []uint32 // the source address, 32 bits at a time
	var version uint32
	var srcOff int32
	if peer.Is4() {
		a := peer.As4()
		words, version, srcOff = []uint32{binary.BigEndian.Uint32(a[:])}, 0x40, 12
	} else {
		a := peer.As16()
		for i := 0; i < 16; i += 4 {
			words = append(words, binary.BigEndian.Uint32(a[i:]))
		}
		version, srcOff = 0x60, 8
	}
	// ldb version; and 0xf0; jeq version (else drop); then per word: ld; jeq
	// (else drop); keep.
	n := 3 + 2*len(words) // instructions before "keep"
	p := []syscall.SockFilter{
		{Code: ldB, K: k(0)},
		{Code: and, K: 0xf0},
		{Code: jeq, Jt: 0, Jf: uint8(n - 2), K: version}, // to drop, one past keep
	}
	for i, w := range words {
		p = append(p,
			syscall.SockFilter{Code: ldW, K: k(srcOff + int32(4*i))},
			syscall.SockFilter{Code: jeq, Jt: 0, Jf: uint8(n - len(p) - 1), K: w})
	}
	p = append(p, syscall.SockFilter{Code: ret, K: 0xffffffff}) // keep the whole segment
	return append(p, drop...)
}
