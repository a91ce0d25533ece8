package ucp_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// Descriptors and remote keys come from other processes and grant access
// to memory: every error path that takes one must describe it (sizes,
// offsets, field values) without printing it, whole or in part.
func TestErrorsDoNotShowKeys(t *testing.T) {
	leakcheck.Goroutines(t)
	p := newPair(t, onTLS("posix,sysv,self"), withPeerErr(false), runServer())
	target, err := p.ctx.Allocate(64 << 10)
	require.NoError(t, err)
	defer target.Close()
	rkey, err := target.PackRemoteKey()
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(6, 6))
	secrets := map[string][]byte{"rkey": rkey}
	var errs []error
	collect := func(what string, err error) {
		if err != nil {
			errs = append(errs, err)
			assert.Empty(t, leakcheck.FindExposed(err.Error(), secrets), "%s: %v", what, err)
		}
	}

	// Descriptors: honest ones of a device this machine lacks, each
	// truncation, each byte corrupted, and random garbage, through the
	// parser and the import.
	var descs [][]byte
	for _, s := range []int{6, 14} {
		d := sampleDescriptor(s)
		descs = append(descs, d)
		for n := range len(d) {
			descs = append(descs, d[:n])
		}
		for i := range d {
			c := append([]byte(nil), d...)
			c[i] ^= byte(1 + rng.IntN(255))
			descs = append(descs, c)
		}
	}
	for range 400 { // most fail to parse: an import is tried only after a parse
		b := make([]byte, 44+rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		b[0] = 43
		descs = append(descs, b)
	}
	for i, d := range descs {
		secrets["descriptor"] = d
		parsed, perr := ucp.ParseDescriptor(d)
		collect("parse", perr)
		if perr != nil {
			continue
		}
		m, ierr := p.ctx.Import(parsed)
		if ierr == nil {
			m.Close() // the 3-byte dummy imports
		}
		collect("import", ierr)
		if i == 0 {
			require.ErrorIs(t, ierr, ucs.ErrUnreachable, "the honest descriptor of an absent device")
		}
	}
	delete(secrets, "descriptor")

	// Remote keys refused by the binding: empty, on a closed endpoint, or
	// used after their key was closed.
	_, err = p.ep.UnpackRemoteKey(context.Background(), nil)
	collect("empty rkey", err)
	addr, err := p.server.PackAddress()
	require.NoError(t, err)
	closed, err := p.client.ConnectWorker(addr, ucp.WithPeerErrorHandling(false))
	require.NoError(t, err)
	closeEP(t, closed)
	_, err = closed.UnpackRemoteKey(context.Background(), rkey)
	require.ErrorIs(t, err, ucs.ErrClosed)
	collect("closed endpoint", err)
	rk, err := p.ep.UnpackRemoteKey(context.Background(), rkey)
	require.NoError(t, err)
	require.NoError(t, rk.Close())
	_, err = putAt([]byte{1}, target.Address(), rk)
	collect("closed rkey", err)

	// UCT: keys of the wrong length are refused before UCX; keys of the
	// right length that name no segment are refused by UCX; an attach on
	// a memory domain that cannot export is refused before UCX.
	reports, err := uct.Probe()
	require.NoError(t, err)
	for _, r := range reports {
		if r.MD == "" {
			continue
		}
		md, err := uct.OpenMD(r.MD)
		require.NoError(t, err)
		size := md.Attr().RkeyPackedSize
		for _, n := range []int{size + 1, max(size-1, 0), size} {
			if n == 0 {
				continue // md without rkeys: nothing to unpack
			}
			garbage := make([]byte, n)
			for i := range garbage {
				garbage[i] = byte(rng.Uint32())
			}
			secrets["uct rkey"] = garbage
			var k *uct.RemoteKey
			log := captureOutput(t, func() { k, err = md.UnpackRemoteKey(garbage) })
			if err == nil {
				k.Close() // an MD whose keys carry no checkable content
			}
			collect("uct unpack on "+r.MD, err)
			if log != "" {
				t.Logf("UCX logged, unpacking a %d-byte key on %s: %s", n, r.MD, log)
			}
			assert.Empty(t, leakcheck.FindExposed(log, secrets), "UCX's log of the failed unpack on %s", r.MD)
		}
		secrets["uct descriptor"] = sampleDescriptor(6)
		_, err = md.Attach(sampleDescriptor(6), uct.WithHideErrors())
		if r.HaveExportedMkey() == nil {
			t.Logf("%s can export: its attach of a foreign descriptor: %v", r.MD, err)
		} else {
			require.True(t, errors.Is(err, ucs.ErrUnsupported), "%s: %v", r.MD, err)
		}
		collect("attach on "+r.MD, err)
		delete(secrets, "uct rkey")
		delete(secrets, "uct descriptor")
		require.NoError(t, md.Close())
	}
	t.Logf("%d error texts checked, none shows a descriptor or key", len(errs))
	assert.Greater(t, len(errs), 500)
}

// captureOutput runs fn with file descriptors 1 and 2 (UCX logs to
// stdout unless told otherwise) sent to a pipe, and returns what was
// written. fn must not log through testing meanwhile.
func captureOutput(t *testing.T, fn func()) string {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		r.Close()
		out <- string(b)
	}()
	var saved []int
	for _, fd := range []int{1, 2} {
		s, err := syscall.Dup(fd)
		require.NoError(t, err)
		saved = append(saved, s)
		require.NoError(t, syscall.Dup3(int(w.Fd()), fd, 0))
	}
	restore := func() {
		for i, fd := range []int{1, 2} {
			if saved[i] >= 0 {
				syscall.Dup3(saved[i], fd, 0)
				syscall.Close(saved[i])
				saved[i] = -1
			}
		}
	}
	defer func() { restore(); w.Close() }() // also when fn fails the test
	fn()
	restore()
	w.Close()
	return <-out
}
