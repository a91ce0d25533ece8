//go:build !ucxgo_unverified_ucx

package cgo

// AllowUnverified reports that the build accepts releases newer than
// NewestVerifiedMinor (the ucxgo_unverified_ucx build tag).
const AllowUnverified = false
