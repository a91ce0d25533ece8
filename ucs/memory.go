package ucs

import (
	"strconv"
	"strings"
	"sync"

	"github.com/ucxgo/ucx/internal/bitnames"
)

// MemoryType is a ucs_memory_type_t value, shared by packages uct and ucp.
type MemoryType uint8

// Memory types (values shared by every supported release).
const (
	MemoryHost MemoryType = iota
	MemoryCUDA
	MemoryCUDAManaged
	MemoryROCm
	MemoryROCmManaged
	MemoryRDMA
	MemoryZEHost
	MemoryZEDevice
	MemoryZEManaged
	MemoryGaudi // UCX 1.21+
)

// KnownByLoaded reports whether the loaded UCX release has memory type t
// (UCS_MEMORY_TYPE_LAST: 6 in 1.16, 9 in 1.17 to 1.20, 10 from 1.21 on);
// a value from a newer peer is unknown here and UCX would index past its
// tables with it.
func (t MemoryType) KnownByLoaded() bool { return int(t) < LoadedMemoryTypes() }

// LoadedMemoryTypes is the number of memory types the loaded release has.
var LoadedMemoryTypes = sync.OnceValue(func() int {
	switch m := LoadedVersion().Minor; {
	case m >= 21:
		return 10
	case m >= 17:
		return 9
	default:
		return 6
	}
})

var memoryTypeNames = []string{
	"host", "cuda", "cuda-managed", "rocm", "rocm-managed", "rdma",
	"ze-host", "ze-device", "ze-managed", "gaudi",
}

func (t MemoryType) String() string {
	if int(t) < len(memoryTypeNames) {
		return memoryTypeNames[t]
	}
	return "type" + strconv.Itoa(int(t))
}

// MemoryTypes is a bitmap of memory types (bit n = MemoryType n).
type MemoryTypes uint64

// Has reports whether t is in the set.
func (s MemoryTypes) Has(t MemoryType) bool { return t < 64 && s&(1<<t) != 0 }

// Names lists the memory types in the set.
func (s MemoryTypes) Names() []string { return bitnames.Names(uint64(s), memoryTypeNames, "type") }

func (s MemoryTypes) String() string { return strings.Join(s.Names(), ",") }

// MarshalJSON writes the set as a list of names.
func (s MemoryTypes) MarshalJSON() ([]byte, error) {
	return bitnames.Marshal(uint64(s), memoryTypeNames, "type")
}

// UnmarshalJSON reads the list of names MarshalJSON writes.
func (s *MemoryTypes) UnmarshalJSON(b []byte) error {
	v, err := bitnames.Unmarshal(b, memoryTypeNames, "type")
	*s = MemoryTypes(v)
	return err
}

// MemKind says where a mapping's memory comes from, in package ucp and
// package uct alike.
type MemKind uint8

// Kinds of memory mapping.
const (
	// MemAllocated: UCX allocated it (ucp Context.Allocate, uct MD.Alloc).
	MemAllocated MemKind = iota
	// MemRegistered: existing memory registered with UCX.
	MemRegistered
	// MemImported: another process's exported memory (ucp Context.Import,
	// uct MD.Attach).
	MemImported
)

func (k MemKind) String() string {
	switch k {
	case MemAllocated:
		return "allocated"
	case MemRegistered:
		return "registered"
	case MemImported:
		return "imported"
	}
	return "MemKind(" + strconv.Itoa(int(k)) + ")"
}
