// Package cgo is ucx-go's one crossing into C: every call from Go into
// libucx goes through a function of this package, and each such function is
// one cgo call into a shim of include/ucxgo/shim.h (fill the parameters,
// call UCX, return the status). It speaks Go types only, so that packages
// uct and ucp stay free of cgo.
//
// Applications do not import it. It is the raw layer under uct and ucp:
// it checks nothing that UCX does not, holds no state and owns nothing
// (except the log shim, log_shim.c: the buffer UCX's log lines wait in for
// package ucs, its pipe and its on/off flag), so a wrong call through it
// crashes the process as a wrong call into libucx would. No public type of uct, ucp or ucs is one of its types. (It stays
// a top-level directory, as the project's layout fixes, rather than
// internal/.)
package cgo

/*
#cgo pkg-config: ucx ucx-uct
#cgo CFLAGS: -I${SRCDIR}/../include -O2 -Wall
#include "ucxgo/shim.h"

static void ucxgo_noop(void) {}
*/
import "C"

import "unsafe"

// Status is a raw ucs_status_t; package ucs gives it a Go meaning.
type Status int8

// Version is a UCX release number.
type Version struct{ Major, Minor, Patch uint }

// BuiltVersion is the UCX release whose headers this binary was compiled with.
func BuiltVersion() Version {
	var ma, mi, pa C.unsigned
	C.ucxgo_built_version(&ma, &mi, &pa)
	return Version{uint(ma), uint(mi), uint(pa)}
}

// LoadedVersion is the release of the libucp loaded at run time
// (ucp_get_version is UCX's only run-time version call).
func LoadedVersion() Version {
	abi := C.ucxgo_abi()
	return Version{uint(abi.major), uint(abi.minor), uint(abi.patch)}
}

// The range of releases this binding runs on: from OldestMinor, up to
// NewestVerifiedMinor unless built with the ucxgo_unverified_ucx tag
// (AllowUnverified).
const (
	OldestMinor         = C.UCXGO_OLDEST_MINOR
	NewestVerifiedMinor = C.UCXGO_NEWEST_VERIFIED_MINOR
)

// LoadedSupported reports whether the shims can drive the loaded release.
func LoadedSupported() bool { return C.ucxgo_abi().supported != 0 }

// AttrLayoutSince is the first release of the uct_md_attr_v2_t layout the
// shims use for the loaded release (16, 18 or 22).
func AttrLayoutSince() uint { return uint(C.ucxgo_abi().md_attr_since) }

// Crossing makes one empty call into C: the fixed cost each operation of
// the binding pays at least once, measured by the benchmarks.
func Crossing() { C.ucxgo_noop() }

// StatusString is UCX's own text for s.
func StatusString(s Status) string {
	return C.GoString(C.ucs_status_string(C.ucs_status_t(s)))
}

// bytesPtr is the address of b's first byte, or nil when b is empty.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}
