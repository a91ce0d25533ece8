//go:build !amd64 && !arm64

package datapath

// No memfd_create number known for this architecture: NewMemfd fails.
const sysMemfdCreate = ^uintptr(0)
