package main

import "unsafe"

// unsafePointer is the first byte of an mmap'ed region (memory the Go
// runtime does not manage, so it may be handed to UCX as a pointer).
func unsafePointer(region []byte) unsafe.Pointer { return unsafe.Pointer(&region[0]) }
