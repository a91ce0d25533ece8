//go:build !linux

package ucp

// physicalMemory is this machine's RAM in bytes, 0 if unknown.
func physicalMemory() uint64 { return 0 }
