package ucp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/wire"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// addressSetup is a server worker whose UCX address the tests damage, and
// a client worker that connects to the damaged copies.
type addressSetup struct {
	name    string
	ctx     *ucp.Context
	server  *ucp.Worker
	client  *ucp.Worker
	raw     []byte // the server's UCX address
	peerErr ucp.EndpointOption
	key     []byte // a packed key of the server's memory
	base    uint64
}

func newAddressSetup(t *testing.T, tls, version string) *addressSetup {
	s := &addressSetup{name: tls + "/" + version}
	p := newPair(t, onTLS(tls), withContext(ucp.WithConfig("ADDRESS_VERSION", version)), unconnected(), runServer())
	s.ctx, s.server, s.client = p.ctx, p.server, p.client
	addr, err := s.server.PackAddress()
	require.NoError(t, err)
	s.raw = addr.UCX()
	s.peerErr = ucp.WithPeerErrorHandling(tls == "tcp") // shared memory has none
	mem := p.allocate(t, 4096)
	s.key, err = mem.PackRemoteKey()
	require.NoError(t, err)
	s.base = mem.Address()
	return s
}

// try connects the client to raw and, where UCX takes it, flushes, puts
// into the server's memory and flushes again, each bounded by a short
// timeout: a damaged address may name nothing that answers. It reports
// whether ConnectWorker took the address.
func (s *addressSetup) try(t *testing.T, raw []byte) (taken bool, err error) {
	ep, err := s.client.ConnectWorker(ucp.WorkerAddressFromUCX(raw), s.peerErr)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if ep.Flush(ctx) == nil {
		if rkey, err := ep.UnpackRemoteKey(ctx, s.key); err == nil {
			if req, err := putAt(make([]byte, 8), s.base, rkey); err == nil {
				req.Detach()
			}
			ep.Flush(ctx)
			rkey.Close()
		}
	}
	closeEP(t, ep)
	return true, nil
}

// offsetIn is where sub starts inside b (sub is a subslice of b).
func offsetIn(b, sub []byte) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// TestCraftedWorkerAddress gives ConnectWorker UCX addresses damaged after
// packing, with a valid checksum (WorkerAddressFromUCX), as a peer can
// craft them: every bit flipped outside the device and interface addresses
// (see named below), every cut, every interface's address emptied. Before the format walk, a tcp interface address of length 0
// crashed the process in ucp_ep_create (8 runs in 10, 1.18.1).
func TestCraftedWorkerAddress(t *testing.T) {
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("UCXGO_ADDRESS_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	for _, tls := range []string{"tcp", "posix,sysv,self,cma", "all"} {
		for _, version := range []string{"v1", "v2"} {
			t.Run(tls+"/"+version, func(t *testing.T) {
				s := newAddressSetup(t, tls, version)
				info, err := wire.WalkWorkerAddress(s.raw)
				require.NoError(t, err)
				taken, _ := s.try(t, s.raw)
				require.True(t, taken, "the undamaged address")

				// Emptied: each interface's address, or its device's,
				// of length 0 with the format kept.
				for k, i := range info.Interfaces {
					for _, field := range []struct {
						name, want string
						addr       []byte
						lenMask    byte
					}{
						{"interface", "empty interface address", i.IfaceAddr, 0x3f},
						{"device", "empty device address", i.DeviceAddr, 0x1f},
					} {
						if len(field.addr) == 0 || len(field.addr) >= int(field.lenMask) {
							continue // nothing to empty, or a v2 extended length
						}
						at := offsetIn(s.raw, field.addr)
						crafted := bytes.Clone(s.raw[:at])
						crafted[at-1] &^= field.lenMask
						crafted = append(crafted, s.raw[at+len(field.addr):]...)
						_, err := s.try(t, crafted)
						require.ErrorIs(t, err, ucs.ErrInvalidParam, "interface %d: %s address emptied", k, field.name)
						assert.Contains(t, err.Error(), field.want)
					}
				}

				// The bytes of device and interface addresses name things
				// outside this test: hosts and ports (tcp), segment ids and
				// /proc/PID/fd files that UCX maps and writes its FIFO into
				// (sysv, posix), process ids it reads and writes with
				// process_vm_writev (cma). A flipped one makes UCX reach
				// them, with this process's rights, as a crafted address
				// can (docs/behaviour.md, "Not guaranteed"); the test flips every
				// other byte: the framing the walk checks, and the
				// attributes.
				named := make([]bool, len(s.raw))
				for _, i := range info.Interfaces {
					for _, a := range [][]byte{i.DeviceAddr, i.IfaceAddr} {
						for k := range a {
							named[offsetIn(s.raw, a)+k] = true
						}
					}
				}
				// Cut: each interface address shorter than its transport
				// reads, the format kept.
				for k, i := range info.Interfaces {
					if len(i.IfaceAddr) < 2 || len(i.IfaceAddr) >= 0x3f {
						continue
					}
					at := offsetIn(s.raw, i.IfaceAddr)
					crafted := bytes.Clone(s.raw[:at+1])
					crafted[at-1] = crafted[at-1]&^0x3f | 1
					crafted = append(crafted, s.raw[at+len(i.IfaceAddr):]...)
					_, err := s.try(t, crafted)
					require.ErrorIs(t, err, ucs.ErrInvalidParam, "interface %d: address cut to 1 byte", k)
					assert.Contains(t, err.Error(), "where the transport reads")
				}

				var refused, failed, taken1 int
				for range rounds {
					for i := range s.raw {
						for bit := range 8 {
							if named[i] {
								continue
							}
							flipped := bytes.Clone(s.raw)
							flipped[i] ^= 1 << bit
							if os.Getenv("UCXGO_ADDRESS_TRACE") != "" {
								fmt.Fprintf(os.Stderr, "%s byte %d bit %d\n", s.name, i, bit)
							}
							ok, err := s.try(t, flipped)
							if ok {
								taken1++
								continue
							}
							if errors.Is(err, ucs.ErrInvalidParam) {
								refused++
							} else {
								// UCX refused it itself: a clean error
								failed++
								var ue *ucs.Error
								require.ErrorAs(t, err, &ue, "byte %d bit %d", i, bit)
							}
						}
						_, err := s.try(t, s.raw[:i])
						require.ErrorIs(t, err, ucs.ErrInvalidParam, "cut to %d bytes", i)
					}
				}
				t.Logf("%s: %d-byte address, %d interfaces; of %d single-bit flips, %d refused here, %d refused by UCX, %d taken", s.name, len(s.raw), len(info.Interfaces), refused+failed+taken1, refused, failed, taken1)
				taken, _ = s.try(t, s.raw)
				require.True(t, taken, "the undamaged address, after the damaged ones")
			})
		}
	}
}

// FuzzConnectWorker feeds foreign bytes to ConnectWorker as a C peer's UCX
// address: bytes whose walk fails must be refused in Go (ucs.ErrInvalidParam);
// well-formed ones go to the real ucp_ep_create, then a flush and a forced
// close, when each interface of a transport here carries device and
// interface addresses that a real address of that transport carried (the
// sandbox: other bytes there name hosts, segments, files and processes
// outside the test; see TestCraftedWorkerAddress). Nothing may crash or
// hang.
func FuzzConnectWorker(f *testing.F) {
	client := newContext(f)
	w, err := client.NewWorker()
	require.NoError(f, err)
	f.Cleanup(func() { w.Close() })
	// The real contents, per transport name checksum.
	real := map[uint16]map[string]bool{}
	content := func(i wire.AddressInterface) string { return string(i.DeviceAddr) + "\x00" + string(i.IfaceAddr) }
	for _, version := range []string{"v1", "v2"} {
		ctx := newContext(f, ucp.WithConfig("ADDRESS_VERSION", version))
		server, err := ctx.NewWorker()
		require.NoError(f, err)
		f.Cleanup(func() { server.Close() })
		runWorker(f, server)
		addr, err := server.PackAddress()
		require.NoError(f, err)
		raw := addr.UCX()
		info, err := wire.WalkWorkerAddress(raw)
		require.NoError(f, err)
		for _, i := range info.Interfaces {
			if real[i.TransportCsum] == nil {
				real[i.TransportCsum] = map[string]bool{}
			}
			real[i.TransportCsum][content(i)] = true
		}
		f.Add(raw)
	}
	var connected, taken int // how far inputs went, to $UCXGO_FUZZ_STATS
	f.Cleanup(func() {
		if path := os.Getenv("UCXGO_FUZZ_STATS"); path != "" {
			if out, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintf(out, "FuzzConnectWorker: %d to ucp_ep_create, %d taken\n", connected, taken)
				out.Close()
			}
		}
	})
	f.Fuzz(func(t *testing.T, raw []byte) {
		info, werr := wire.WalkWorkerAddress(raw)
		if werr != nil {
			_, err := w.ConnectWorker(ucp.WorkerAddressFromUCX(raw))
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("an address whose walk fails (%v) was not refused: %v", werr, err)
			}
			return
		}
		for _, i := range info.Interfaces {
			if contents, here := real[i.TransportCsum]; here && !contents[content(i)] {
				return // names something outside the test
			}
		}
		connected++
		ep, err := w.ConnectWorker(ucp.WorkerAddressFromUCX(raw))
		if err != nil {
			return
		}
		taken++
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		ep.Flush(ctx)
		closeEP(t, ep)
	})
}

// In UCX's unified mode the address's interface entries carry no lengths,
// so nothing can be checked before UCX reads them: ConnectWorker refuses
// every address, and says why.
func TestConnectWorkerUnifiedMode(t *testing.T) {
	p := newPair(t, withContext(ucp.WithConfig("UNIFIED_MODE", "y")), unconnected())
	addr, err := p.server.PackAddress()
	require.NoError(t, err)
	_, err = p.client.ConnectWorker(addr)
	require.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.Contains(t, err.Error(), "UCX_UNIFIED_MODE=y")
}
