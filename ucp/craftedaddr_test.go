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
	s.ctx = newContext(t, ucp.WithConfig("TLS", tls), ucp.WithConfig("ADDRESS_VERSION", version))
	var err error
	s.server, err = s.ctx.NewWorker()
	require.NoError(t, err)
	s.client, err = s.ctx.NewWorker()
	require.NoError(t, err)
	runWorker(t, s.server)
	addr, err := s.server.PackAddress()
	require.NoError(t, err)
	s.raw = addr.UCX()
	s.peerErr = ucp.WithPeerErrorHandling(tls == "tcp") // shared memory has none
	mem, err := s.ctx.Allocate(4096)
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	s.key, err = mem.PackRemoteKey()
	require.NoError(t, err)
	s.base = mem.Address()
	t.Cleanup(func() {
		s.client.Close()
		s.server.Close()
		s.ctx.Close()
	})
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
			if req, err := ep.Put(make([]byte, 8), s.base, rkey); err == nil {
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
// craft them: every bit flipped, every cut, every interface's address
// emptied. Before the format walk, a tcp interface address of length 0
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

				var refused, failed, taken1 int
				for range rounds {
					for i := range s.raw {
						for bit := range 8 {
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
