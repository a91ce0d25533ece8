package datapath

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Memfd is an anonymous shared file (memfd_create) mapped read-write in
// this process: memory another process can map, given the file.
type Memfd struct {
	f *os.File
	b []byte // the whole mapping, a whole number of pages
	n int    // the length asked for
}

// NewMemfd creates an anonymous shared file of n bytes (rounded up to a
// whole number of pages) and maps it read-write, shared.
func NewMemfd(name string, n int) (*Memfd, error) {
	if n <= 0 {
		return nil, fmt.Errorf("length %d: must be positive", n)
	}
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	if size < n {
		return nil, fmt.Errorf("length %d overflows", n)
	}
	if sysMemfdCreate == ^uintptr(0) {
		return nil, fmt.Errorf("memfd_create: %w on this architecture", syscall.ENOSYS)
	}
	cname, err := syscall.BytePtrFromString(name)
	if err != nil {
		return nil, err
	}
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(cname)), mfdCloexec, 0)
	if errno != 0 {
		return nil, fmt.Errorf("memfd_create: %w", errno)
	}
	f := os.NewFile(fd, "memfd:"+name)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing the shared file to %d bytes: %w", size, err)
	}
	b, err := syscall.Mmap(int(fd), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mapping the shared file: %w", err)
	}
	hugePages(b)
	return &Memfd{f: f, b: b, n: n}, nil
}

// Bytes is the mapping, n bytes long.
func (m *Memfd) Bytes() []byte { return m.b[:m.n:m.n] }

// Size is the length mapped: n rounded up to a whole number of pages.
func (m *Memfd) Size() int { return len(m.b) }

// Open opens the file anew, read-only unless writable: a process given
// the read-only file can map it only read-only, and cannot make its
// mapping writable (mprotect refuses; the file's mode is the mapping's).
func (m *Memfd) Open(writable bool) (*os.File, error) {
	flag := os.O_RDONLY
	if writable {
		flag = os.O_RDWR
	}
	return os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(m.f.Fd())), flag|syscall.O_CLOEXEC, 0)
}

// Close unmaps the memory and closes the file; a process that mapped it
// keeps its own mapping until it unmaps or exits.
func (m *Memfd) Close() error {
	err := syscall.Munmap(m.b)
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	return err
}

const mfdCloexec = 0x1

// hugePages asks for transparent huge pages on a shared mapping
// (MADV_HUGEPAGE): where the system allows them for shared memory
// (/sys/kernel/mm/transparent_hugepage/shmem_enabled "advise" or
// "within_size"), the kernel copies in and out of fewer pages. Elsewhere
// it changes nothing; its failure is not an error.
func hugePages(b []byte) {
	if len(b) >= 2<<20 {
		syscall.Madvise(b, 14) // MADV_HUGEPAGE
	}
}
