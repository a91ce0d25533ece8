package uct

import (
	"strings"

	"github.com/ucxgo/ucx/internal/bitnames"
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
func (f MDFlags) Names() []string { return bitnames.Names(uint64(f), mdFlagNames, "bit") }

func (f MDFlags) String() string { return strings.Join(f.Names(), "|") }

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

// MarshalJSON writes the flags as a list of names.
func (f MDFlags) MarshalJSON() ([]byte, error) {
	return bitnames.Marshal(uint64(f), mdFlagNames, "bit")
}

// UnmarshalJSON reads the list of names MarshalJSON writes.
func (f *MDFlags) UnmarshalJSON(b []byte) error {
	v, err := bitnames.Unmarshal(b, mdFlagNames, "bit")
	*f = MDFlags(v)
	return err
}
