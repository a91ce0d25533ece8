package uct

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"

	"github.com/ucxgo/ucx/ucs"
)

// MDFlags are an MD's capabilities (UCT_MD_FLAG_*).
type MDFlags uint64

// MD capability flags; the values are the same in every supported release.
const (
	FlagAlloc         MDFlags = 0x1    // MD can allocate memory
	FlagReg           MDFlags = 0x2    // MD can register memory
	FlagNeedMemh      MDFlags = 0x4    // transports need a memory handle
	FlagNeedRkey      MDFlags = 0x8    // transports need a remote key
	FlagAdvise        MDFlags = 0x10   // memory advice supported
	FlagFixed         MDFlags = 0x20   // allocation at a fixed address
	FlagRkeyPtr       MDFlags = 0x40   // remote memory is directly addressable
	FlagSockaddr      MDFlags = 0x80   // socket-address connections
	FlagInvalidate    MDFlags = 0x100  // memory invalidation
	FlagExportedMkey  MDFlags = 0x200  // memory keys can be exported to another process
	FlagRegDMABuf     MDFlags = 0x400  // dma-buf registration
	FlagInvalidateRMA MDFlags = 0x800  // invalidation of RMA access
	FlagInvalidateAMO MDFlags = 0x1000 // invalidation of atomic access
	FlagMemtypeCopy   MDFlags = 0x2000 // memory-type copy (UCX 1.19+)
)

var mdFlagNames = []string{
	"ALLOC", "REG", "NEED_MEMH", "NEED_RKEY", "ADVISE", "FIXED", "RKEY_PTR",
	"SOCKADDR", "INVALIDATE", "EXPORTED_MKEY", "REG_DMABUF", "INVALIDATE_RMA",
	"INVALIDATE_AMO", "MEMTYPE_COPY",
}

// Has reports whether every flag of want is set.
func (f MDFlags) Has(want MDFlags) bool { return f&want == want }

// Names lists the flags set, by their UCX names without the prefix.
func (f MDFlags) Names() []string { return bitNames(uint64(f), mdFlagNames, "bit") }

func (f MDFlags) String() string { return strings.Join(f.Names(), "|") }

// MemoryType is a ucs_memory_type_t value.
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
func (t MemoryType) KnownByLoaded() bool { return int(t) < loadedMemoryTypes() }

var loadedMemoryTypes = sync.OnceValue(func() int {
	switch m := ucs.LoadedVersion().Minor; {
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
	return "unknown"
}

// MemoryTypes is a bitmap of memory types (bit n = MemoryType n).
type MemoryTypes uint64

// Has reports whether t is in the set.
func (s MemoryTypes) Has(t MemoryType) bool { return s&(1<<t) != 0 }

// Names lists the memory types in the set.
func (s MemoryTypes) Names() []string { return bitNames(uint64(s), memoryTypeNames, "type") }

func (s MemoryTypes) String() string { return strings.Join(s.Names(), ",") }

// MemFlags control registration and allocation (uct_md_mem_flags).
type MemFlags uint64

// Registration and allocation flags.
const (
	MemNonBlock           MemFlags = 0x1
	MemFixed              MemFlags = 0x2
	MemLock               MemFlags = 0x4
	MemHideErrors         MemFlags = 0x8
	MemAccessRemotePut    MemFlags = 0x20
	MemAccessRemoteGet    MemFlags = 0x40
	MemAccessRemoteAtomic MemFlags = 0x80
	MemAccessLocalRead    MemFlags = 0x100
	MemAccessLocalWrite   MemFlags = 0x200
	MemAccessAll          MemFlags = 0x3e0
	MemAccessRMA          MemFlags = 0x360
)

// bitNames names each set bit; a bit without a name prints as
// unknown+number (e.g. "bit14").
func bitNames(v uint64, names []string, unknown string) []string {
	var out []string
	for v != 0 {
		b := bits.TrailingZeros64(v)
		v &^= 1 << b
		if b < len(names) {
			out = append(out, names[b])
		} else {
			out = append(out, unknown+strconv.Itoa(b))
		}
	}
	return out
}

// MarshalJSON writes the flags as a list of names.
func (f MDFlags) MarshalJSON() ([]byte, error) { return json.Marshal(nonNil(f.Names())) }

// MarshalJSON writes the set as a list of names.
func (s MemoryTypes) MarshalJSON() ([]byte, error) { return json.Marshal(nonNil(s.Names())) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// UnmarshalJSON reads the list of names MarshalJSON writes.
func (f *MDFlags) UnmarshalJSON(b []byte) error {
	v, err := unmarshalNames(b, mdFlagNames, "bit")
	*f = MDFlags(v)
	return err
}

// UnmarshalJSON reads the list of names MarshalJSON writes.
func (s *MemoryTypes) UnmarshalJSON(b []byte) error {
	v, err := unmarshalNames(b, memoryTypeNames, "type")
	*s = MemoryTypes(v)
	return err
}

func unmarshalNames(b []byte, names []string, unknown string) (uint64, error) {
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, err
	}
	var v uint64
next:
	for _, name := range list {
		for i, n := range names {
			if n == name {
				v |= 1 << i
				continue next
			}
		}
		bit, err := strconv.Atoi(strings.TrimPrefix(name, unknown))
		if err != nil || !strings.HasPrefix(name, unknown) || bit < 0 || bit > 63 {
			return 0, fmt.Errorf("uct: unknown flag name %q", name)
		}
		v |= 1 << bit
	}
	return v, nil
}
