// Package faults runs the real exporter and importer programs against each
// other and breaks things: bad envelopes, killed peers, revocation, and two
// hosts in separate network namespaces.
package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
)

var bin string // folder with the built programs

func TestMain(m *testing.M) {
	testproc.Main()
	dir, err := os.MkdirTemp("", "ucxgo-faults")
	if err != nil {
		panic(err)
	}
	bin = dir
	// One go build for both (dir/ takes each program's name): half the
	// time of two.
	out, err := exec.Command("go", "build", "-o", dir+"/", "../exporter", "../importer").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build exporter and importer: %v\n%s", err, out)
		os.Exit(1)
	}
	code := leakcheck.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// start runs one of the built programs (exporter or importer) through
// prefix (a network namespace's ip netns exec, or none).
func start(t *testing.T, prefix []string, prog string, args ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Spec{Argv: append([]string{filepath.Join(bin, prog)}, args...), Prefix: prefix})
}

type setup struct {
	secret, addrFile string
	netns            []string // command prefix for the exporter (network namespace)
	importerNS       []string
	host             string // the exporter's address to connect to; empty: from addrFile
}

func newSetup(t *testing.T) *setup {
	dir := t.TempDir()
	s := &setup{secret: filepath.Join(dir, "secret"), addrFile: filepath.Join(dir, "addr")}
	require.NoError(t, os.WriteFile(s.secret, []byte("a shared test secret"), 0o600))
	return s
}

func (s *setup) exporter(t *testing.T, args ...string) *testproc.Proc {
	listen := "127.0.0.1:0"
	if s.host != "" {
		listen = s.host + ":0"
	}
	p := start(t, s.netns, "exporter", append([]string{"-listen", listen, "-key-file", s.secret, "-addr-file", s.addrFile}, args...)...)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(s.addrFile); err == nil && len(b) > 0 {
			return p
		}
		select {
		case <-p.Done():
			t.Fatalf("exporter exited: %s", p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("exporter did not start listening")
	return nil
}

func (s *setup) importer(t *testing.T, args ...string) *testproc.Proc {
	b, err := os.ReadFile(s.addrFile)
	require.NoError(t, err)
	return start(t, s.importerNS, "importer", append([]string{"-connect", strings.TrimSpace(string(b)), "-key-file", s.secret, "-timeout", "10s", "-latency-ops", "100"}, args...)...)
}

// A broken envelope is refused with its own error, and the exporter keeps
// serving the next, well-behaved importer.
func TestBadEnvelopeRefusedAndNextImporterServed(t *testing.T) {
	leakcheck.Goroutines(t)
	for fault, want := range map[string]string{
		"magic":     "bad magic",
		"version":   "unsupported version",
		"hmac":      "authentication failed",
		"truncated": "truncated",
		// Authentic, but the descriptor inside fails ParseDescriptor.
		"descriptor": "parse exported descriptor",
	} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel() // each fault its own exporter, port and files
			s := newSetup(t)
			exp := s.exporter(t, "-size", "4", "-serve", "1", "-fault", fault)
			bad := s.importer(t)
			wantCode := 3
			if fault == "descriptor" {
				wantCode = 1
			}
			assert.Equal(t, wantCode, bad.Wait(t, 30*time.Second), "exit code of the refused importer")
			assert.Contains(t, bad.Output(), want)
			good := s.importer(t)
			require.Equal(t, 0, good.Wait(t, 60*time.Second), "second importer: %s", good.Output())
			assert.Contains(t, good.Output(), "importer: PASS")
			require.Equal(t, 0, exp.Wait(t, 30*time.Second))
		})
	}
}

func TestWrongKeyAndExpiredLease(t *testing.T) {
	leakcheck.Goroutines(t)
	s := newSetup(t)
	exp := s.exporter(t, "-size", "4", "-serve", "1")
	wrong := s.importer(t, "-key-file", "/dev/null")
	assert.Equal(t, 2, wrong.Wait(t, 30*time.Second), "an empty key file is a usage error")
	other := start(t, nil, "importer", "-connect", strings.TrimSpace(mustRead(t, s.addrFile)), "-key", "not the secret", "-timeout", "10s")
	assert.Equal(t, 3, other.Wait(t, 30*time.Second))
	assert.Contains(t, other.Output(), "authentication failed")
	good := s.importer(t)
	require.Equal(t, 0, good.Wait(t, 60*time.Second))
	require.Equal(t, 0, exp.Wait(t, 30*time.Second))

	s2 := newSetup(t)
	exp2 := s2.exporter(t, "-size", "4", "-lease", "1ns")
	late := s2.importer(t)
	assert.Equal(t, 3, late.Wait(t, 30*time.Second))
	assert.Contains(t, late.Output(), "lease expired")
	exp2.Cmd.Process.Signal(syscall.SIGTERM)
	require.Equal(t, 0, exp2.Wait(t, 30*time.Second))
}

func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// An importer killed mid-transfer is dropped; the next one is served.
// It is killed while it writes: killed while the exporter serves its gets,
// UCX itself can abort the exporter (measured on 1.23.0~rc1: ucs_fatal
// "unexpected error: Endpoint timeout" in ucp_request.inl, an internal
// send of the AM-emulated get failing; see docs/behaviour.md, known UCX issues).
// 64 MiB in 64 KiB writes (1024 of them) outlast the few milliseconds from
// the importer's "writing" line to the kill; the exporter's count of one
// verification proves the victim never finished its writes. The read
// before them is most of the time: 64 KiB gets run at about 25 MB/s over
// tcp here (256 MiB took 11 s).
func TestImporterKilledMidTransfer(t *testing.T) {
	leakcheck.Goroutines(t)
	s := newSetup(t)
	exp := s.exporter(t, "-size", "64", "-serve", "1")
	victim := s.importer(t, "-chunk", "65536")
	exp.WaitOutput(t, "importer 1 connected", 60*time.Second)
	victim.WaitLine(t, "importer: read verified; writing", 60*time.Second)
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, victim.Cmd.Process.Signal(syscall.SIGKILL))
	victim.Wait(t, 10*time.Second)
	good := s.importer(t)
	require.Equal(t, 0, good.Wait(t, 120*time.Second), "importer after the killed one: %s", good.Output())
	require.Equal(t, 0, exp.Wait(t, 30*time.Second))
	assert.Contains(t, exp.Output(), "served 2 importer(s), 1 verification(s) passed")
}

// An exporter killed mid-transfer: the importer's operations end with an
// error within its timeout, it does not hang.
func TestExporterKilledMidTransfer(t *testing.T) {
	leakcheck.Goroutines(t)
	s := newSetup(t)
	exp := s.exporter(t, "-size", "256")
	imp := s.importer(t, "-chunk", "65536")
	exp.WaitOutput(t, "importer 1 connected", 60*time.Second)
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, exp.Cmd.Process.Signal(syscall.SIGKILL))
	code := imp.Wait(t, 60*time.Second)
	assert.NotEqual(t, 0, code, "importer output: %s", imp.Output())
}

// SIGTERM makes the exporter revoke the key at a running importer and wait
// for its acknowledgement before unmapping.
func TestRevokeOnShutdown(t *testing.T) {
	leakcheck.Goroutines(t)
	s := newSetup(t)
	exp := s.exporter(t, "-size", "4")
	imp := s.importer(t, "-latency-ops", "100000000")
	exp.WaitOutput(t, "importer 1 connected", 60*time.Second)
	// The importer holds the key and uses it (it read the region).
	imp.WaitLine(t, "importer: read verified", 60*time.Second)
	require.NoError(t, exp.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 5, imp.Wait(t, 60*time.Second), "importer exit code after a revoke")
	assert.Contains(t, imp.Output(), "revoked")
	require.Equal(t, 0, exp.Wait(t, 30*time.Second))
	assert.Contains(t, exp.Output(), "revoked 1 (0 unacknowledged)")
}

// hosts are two network namespaces joined by a veth pair: a (10.77.0.1)
// and b (10.77.0.2). Only these namespaces get addresses.
type hosts struct {
	a, b     string   // namespace names
	va, vb   string   // their ends of the veth pair
	execA    []string // command prefixes running a program in a or b
	execB    []string
	hostA    string // a's address
	hostB    string
	setLinkB func(up bool) error
}

var nsCount atomic.Int32

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func twoHosts(t *testing.T) *hosts {
	ns := fmt.Sprintf("ucxgo%dx%d", os.Getpid(), nsCount.Add(1))
	h := &hosts{a: ns + "a", b: ns + "b", va: ns + "va", vb: ns + "vb", hostA: "10.77.0.1", hostB: "10.77.0.2"}
	h.execA = []string{"ip", "netns", "exec", h.a}
	h.execB = []string{"ip", "netns", "exec", h.b}
	h.setLinkB = func(up bool) error {
		state := "down"
		if up {
			state = "up"
		}
		return ipCmd("-n", h.b, "link", "set", h.vb, state)
	}
	steps := [][]string{
		{"netns", "add", h.a}, {"netns", "add", h.b},
		{"link", "add", h.va, "type", "veth", "peer", "name", h.vb},
		{"link", "set", h.va, "netns", h.a}, {"link", "set", h.vb, "netns", h.b},
		{"-n", h.a, "addr", "add", h.hostA + "/24", "dev", h.va},
		{"-n", h.b, "addr", "add", h.hostB + "/24", "dev", h.vb},
		{"-n", h.a, "link", "set", h.va, "up"}, {"-n", h.b, "link", "set", h.vb, "up"},
		{"-n", h.a, "link", "set", "lo", "up"}, {"-n", h.b, "link", "set", "lo", "up"},
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", h.a).Run()
		exec.Command("ip", "netns", "del", h.b).Run()
	})
	for _, step := range steps {
		require.NoError(t, ipCmd(step...), "creating the namespaces (needs root and iproute2)")
	}
	return h
}

// Two hosts: the exporter and the importer in their own network namespaces
// joined by a veth pair, over tcp.
func TestTwoHostsInNetworkNamespaces(t *testing.T) {
	leakcheck.Goroutines(t)
	h := twoHosts(t)
	s := newSetup(t)
	s.netns, s.importerNS, s.host = h.execA, h.execB, h.hostA
	exp := s.exporter(t, "-size", "16", "-serve", "1")
	imp := s.importer(t)
	require.Equal(t, 0, imp.Wait(t, 120*time.Second), "importer in the second namespace: %s", imp.Output())
	assert.Contains(t, imp.Output(), "importer: PASS")
	require.Equal(t, 0, exp.Wait(t, 30*time.Second))
	assert.Contains(t, exp.Output(), "connected from "+h.hostB)
}
