package faults

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/examples/envelope"
	"github.com/ucxgo/ucx/examples/internal/demo"
	"github.com/ucxgo/ucx/internal/leakcheck"
	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
)

// fetchEnvelope connects to the exporter as an importer would and returns
// the sealed envelope it sends, so that the test knows the bytes the
// programs must not print.
func fetchEnvelope(t *testing.T, addr string) []byte {
	t.Helper()
	ctx, err := ucp.NewContext()
	require.NoError(t, err)
	defer ctx.Close()
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	defer w.Close()
	envs := make(chan []byte, 1)
	require.NoError(t, w.SetAMHandler(demo.AMEnvelope, func(m *ucp.AMMessage) { envs <- m.Data }))
	run, stop := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); w.Run(run) }()
	defer func() { stop(); <-runDone }()
	ep, err := w.Connect(addr)
	require.NoError(t, err)
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ep.Close(c, ucp.CloseForce)
		cancel()
	}()
	select {
	case raw := <-envs:
		return raw
	case <-time.After(30 * time.Second):
		t.Fatal("no envelope from the exporter")
		return nil
	}
}

// The exporter's key, the envelope around it and the HMAC secret never
// appear in the programs' output (UCX's log included): not when all goes
// well, not in the errors of refused envelopes (each fault), not in a
// descriptor the importer refuses.
func TestKeysNotInProgramOutput(t *testing.T) {
	leakcheck.Goroutines(t)
	for _, fault := range []string{"", "magic", "version", "hmac", "truncated", "descriptor"} {
		name := fault
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each fault its own exporter, port and files
			s := newSetup(t)
			args := []string{"-size", "1"}
			if fault != "" {
				args = append(args, "-fault", fault)
			}
			exp := s.exporter(t, args...)
			first := s.importer(t) // the one a fault is injected into, if any
			first.Wait(t, 60*time.Second)
			raw := fetchEnvelope(t, strings.TrimSpace(mustRead(t, s.addrFile)))
			secret := []byte(mustRead(t, s.secret))
			env, err := envelope.Open(raw, secret, time.Now())
			require.NoError(t, err)
			secrets := map[string][]byte{"envelope": raw, "key": env.Key, "HMAC secret": secret}
			if fault == "descriptor" {
				// What the exporter sends under this fault (examples/exporter).
				secrets["invalid descriptor"] = append([]byte{43}, make([]byte, 60)...)
			}
			outputs := map[string]*testproc.Proc{"first importer": first}
			if fault == "" {
				outputs["importer with the wrong secret"] = start(t, nil, "importer",
					"-connect", strings.TrimSpace(mustRead(t, s.addrFile)), "-key", "not the secret", "-timeout", "10s")
				outputs["importer with the wrong secret"].Wait(t, 60*time.Second)
			}
			if fault == "" {
				require.Equal(t, 0, first.Wait(t, time.Second), "importer: %s", first.Output())
			} else {
				// A good run after a refused one (the first importer wrote
				// nothing, so the exporter's pattern is intact).
				good := s.importer(t, "-json")
				require.Equal(t, 0, good.Wait(t, 60*time.Second), "importer after the fault: %s", good.Output())
				outputs["next importer (-json)"] = good
			}
			require.NoError(t, exp.Cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, exp.Wait(t, 60*time.Second))
			outputs["exporter"] = exp
			for who, p := range outputs {
				out := p.Output()
				assert.Empty(t, leakcheck.FindExposed(out, secrets), "%s output:\n%s", who, out)
			}
			if fault != "" {
				assert.NotEqual(t, "", first.Output(), "the refused importer said why")
				t.Logf("refused importer said: %s", strings.TrimSpace(first.Output()))
			}
		})
	}
}
