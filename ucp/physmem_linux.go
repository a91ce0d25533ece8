package ucp

import (
	"sync"
	"syscall"
)

// physicalMemory is this machine's RAM in bytes, 0 if unknown; asked once
// (a sysinfo call per mapping cost 2 µs on Register4M).
var physicalMemory = sync.OnceValue(func() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
})
