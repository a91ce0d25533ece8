package cgo

/*
#include <netinet/in.h>
#include <sys/socket.h>
*/
import "C"

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"
)

// toSockaddr encodes addr as a struct sockaddr_in or sockaddr_in6.
func toSockaddr(addr netip.AddrPort) (sa syscall.RawSockaddrAny, n int) {
	if a := addr.Addr(); a.Is4() || a.Is4In6() {
		in := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&sa))
		in.Family = syscall.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&in.Port))[:], addr.Port())
		in.Addr = a.Unmap().As4()
		return sa, syscall.SizeofSockaddrInet4
	}
	in6 := (*syscall.RawSockaddrInet6)(unsafe.Pointer(&sa))
	in6.Family = syscall.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&in6.Port))[:], addr.Port())
	in6.Addr = addr.Addr().As16()
	return sa, syscall.SizeofSockaddrInet6
}

// fromSockaddr decodes a struct sockaddr_storage holding IPv4 or IPv6.
func fromSockaddr(ss *C.struct_sockaddr_storage) netip.AddrPort {
	p := unsafe.Pointer(ss)
	switch (*syscall.RawSockaddr)(p).Family {
	case syscall.AF_INET:
		in := (*syscall.RawSockaddrInet4)(p)
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&in.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(in.Addr), port)
	case syscall.AF_INET6:
		in6 := (*syscall.RawSockaddrInet6)(p)
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&in6.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(in6.Addr), port)
	}
	return netip.AddrPort{}
}
