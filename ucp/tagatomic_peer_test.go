package ucp_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/ucp"
)

// A peer in a child process, to be killed: role "review-peer", its
// arguments the mode and what the mode needs.

func init() { testproc.Role("review-peer", reviewPeer) }

func reviewPeer() int {
	args := os.Args[len(os.Args)-reviewPeerArgc():]
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "review-peer:", err); return 1 }
	stdinClosed, stop := context.WithCancel(context.Background())
	go func() { bufio.NewReader(os.Stdin).WriteTo(devNull{}); stop() }()
	mode, tls := args[0], args[1]
	opts := []ucp.ContextOption{ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureAM | ucp.FeatureTag | ucp.FeatureStream | ucp.FeatureAMO32 | ucp.FeatureAMO64)}
	if tls != "" {
		opts = append(opts, ucp.WithConfig("TLS", tls))
	}
	ctx, err := ucp.NewContext(opts...)
	if err != nil {
		return fail(err)
	}
	w, err := ctx.NewWorker()
	if err != nil {
		return fail(err)
	}
	epOpts := []ucp.EndpointOption{ucp.WithPeerErrorHandling(os.Getenv("REVIEW_PEERERR") != "0")}
	switch mode {
	case "stream": // addr: send "hello" on the stream, then wait
		ep, err := w.Connect(stdinClosed, args[2], epOpts...)
		if err != nil {
			return fail(err)
		}
		defer runtime.KeepAlive(ep) // a dropped endpoint is closed by the GC
		req, err := ep.SendStream([]byte("hello"))
		if err != nil {
			return fail(err)
		}
		if err := req.Wait(stdinClosed); err != nil {
			return fail(err)
		}
		fmt.Println("READY")
	default:
		return fail(fmt.Errorf("no mode %q", mode))
	}
	go w.Run(stdinClosed)
	<-stdinClosed.Done()
	return 0
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

// reviewPeerArgc is how many arguments the role got: its command line is
// the test binary, -test.run=^$, then the arguments.
func reviewPeerArgc() int {
	for i, a := range os.Args {
		if a == "-test.run=^$" {
			return len(os.Args) - i - 1
		}
	}
	return 0
}

// startPeer starts the role with args and env.
func startPeer(t *testing.T, env []string, args ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Spec{Role: "review-peer", Args: args, Env: env, Stderr: true})
}

// listenWorker is a worker of a context with every feature, listening on
// loopback; all closed when the test ends.
func listenWorker(t *testing.T, tls string) (*ucp.Context, *ucp.Worker, *ucp.Listener) {
	t.Helper()
	opts := []ucp.ContextOption{ucp.WithFeatures(ucp.FeatureRMA | ucp.FeatureAM | ucp.FeatureTag | ucp.FeatureStream | ucp.FeatureAMO32 | ucp.FeatureAMO64)}
	if tls != "" {
		opts = append(opts, ucp.WithConfig("TLS", tls))
	}
	c := newContext(t, opts...)
	w, err := c.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	l, err := w.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return c, w, l
}

func acceptCtx(t *testing.T, l *ucp.Listener, opts ...ucp.EndpointOption) *ucp.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ep, err := l.Accept(ctx, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { closeEP(t, ep) })
	return ep
}
