//go:build ucxgo_unverified_ucx

package cgo

// Built with the ucxgo_unverified_ucx tag: UCX releases newer than the
// newest verified one build and run, with the newest layouts assumed.

// #cgo CFLAGS: -DUCXGO_ALLOW_UNVERIFIED_UCX
import "C"

// AllowUnverified reports that the build accepts releases newer than
// NewestVerifiedMinor.
const AllowUnverified = true
