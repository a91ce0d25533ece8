// Package uct is the memory-domain layer of UCX's transport API (UCT): it
// discovers components and memory domains (MDs), registers and allocates
// memory, packs remote keys and, where the hardware can, exports memory
// keys for another process (a BlueField DPU, say) to attach.
//
// # Exported keys
//
// Only an MD with the UCT_MD_FLAG_EXPORTED_MKEY capability (mlx5 DevX on
// ConnectX-6 Dx and later, BlueField-2/3) can export. UCX itself does not
// refuse an export pack elsewhere: self, tcp and cma answer success and
// write nothing, posix and sysv write their ordinary rkey into a buffer sized
// for an exported key (0 bytes). [Mem.Export] and [MD.Attach] therefore
// check the capability, and Attach the descriptor's length, in Go before any
// byte reaches UCX, and answer [ucs.ErrUnsupported] with the reason.
//
// # Ownership
//
// Every handle has an idempotent Close. Close marks the handle closed at
// once (its methods then return an error wrapping [ucs.ErrClosed]) and
// releases its UCX object when nothing derived from it is still open: a
// registration, allocation or remote key keeps its MD alive, so Close may be
// called in any order. A handle that is garbage collected without Close is
// released by a cleanup and counted by [ucs.LeakedHandles].
//
// # Threads
//
// Handles may be used from any goroutine. Close waits for calls in flight
// on the same handle. UCX's MD operations are not serialized by the
// binding beyond that.
//
// # Go memory
//
// [MD.Register] pins the slice with a runtime.Pinner for the life of the
// registration, so the Go runtime never moves or frees it while UCX uses it.
// UCX's memory hooks (UCM) intercept libc's mmap and munmap; the Go runtime
// calls the kernel directly, so UCX's registration cache never sees Go heap
// changes. Pinning is what keeps a registered Go buffer valid.
package uct
