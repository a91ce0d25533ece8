package ucp_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
)

// newContext is a context made with opts, closed when the test ends.
func newContext(t testing.TB, opts ...ucp.ContextOption) *ucp.Context {
	t.Helper()
	ctx, err := ucp.NewContext(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// pair is what the tests build: one context, a server and a client worker
// of it, and as its config asks a listener, the client's endpoint to the
// server (ep) and the server's endpoint to the client (sep).
type pair struct {
	ctx                  *ucp.Context
	server, client       *ucp.Worker
	listener             *ucp.Listener
	ep, sep              *ucp.Endpoint
	saddr                ucp.WorkerAddress // the server's address, when connected by it
	serverRun, clientRun *workerRun        // the workers' Runs, as asked
}

// pairConfig says what build makes; newPair's options set it. The zero
// value: UCX's default transports, peer error handling as ucp's default
// (on), the client connected by the server's address, no worker progressed.
type pairConfig struct {
	tls        string // the context's UCX_TLS ("": UCX's default)
	ctxOpts    []ucp.ContextOption
	clientOpts []ucp.WorkerOption
	epOpts     []ucp.EndpointOption // for every endpoint build makes
	connect    pairConnect
	listen     bool // a listener on 127.0.0.1:0 (byListener makes one anyway)
	back       bool // byAddress: the server connects to the client's address too (sep)
	runServer  bool // progressed by Run from before connecting until closed
	runClient  bool
	flush      bool // flush ep and sep before returning (the wire-up)
}

type pairConnect int

const (
	byAddress    pairConnect = iota // ep: ConnectWorker to the server's address
	byListener                      // ep: Connect to the listener; sep: its Accept
	notConnected                    // no endpoint
)

// pairOption is an option of newPair.
type pairOption func(*pairConfig)

// onTLS sets the context's UCX_TLS.
func onTLS(tls string) pairOption { return func(c *pairConfig) { c.tls = tls } }

// withContext adds context options (after UCX_TLS).
func withContext(opts ...ucp.ContextOption) pairOption {
	return func(c *pairConfig) { c.ctxOpts = append(c.ctxOpts, opts...) }
}

// withClientOpts makes the client worker with opts.
func withClientOpts(opts ...ucp.WorkerOption) pairOption {
	return func(c *pairConfig) { c.clientOpts = append(c.clientOpts, opts...) }
}

// withPeerErr sets the endpoints' peer error handling.
func withPeerErr(on bool) pairOption {
	return func(c *pairConfig) { c.epOpts = []ucp.EndpointOption{ucp.WithPeerErrorHandling(on)} }
}

// viaListener connects through a listener: Connect, then Accept.
func viaListener() pairOption { return func(c *pairConfig) { c.connect = byListener } }

// unconnected makes no endpoint.
func unconnected() pairOption { return func(c *pairConfig) { c.connect = notConnected } }

// listening makes the listener without connecting through it.
func listening() pairOption { return func(c *pairConfig) { c.listen = true } }

// connectBack also connects the server to the client's address (sep).
func connectBack() pairOption { return func(c *pairConfig) { c.back = true } }

// runServer and runClient progress that worker by Run until the test ends.
func runServer() pairOption { return func(c *pairConfig) { c.runServer = true } }
func runClient() pairOption { return func(c *pairConfig) { c.runClient = true } }

// newPair builds a pair, closed when the test ends (Close is idempotent: a
// test may close any part sooner). Without options: UCX's default
// transports, the client connected to the server's address with ucp's
// default peer error handling (on), no worker progressed. Options:
//   - onTLS, withContext, withClientOpts: the context's UCX_TLS and other
//     options, the client worker's options;
//   - withPeerErr: every endpoint's peer error handling;
//   - viaListener: connect through a listener (Connect; Accept gives sep);
//     unconnected: no endpoint; listening: a listener all the same;
//     connectBack: the server connects to the client's address too (sep);
//   - runServer, runClient: that worker Runs from before connecting on.
func newPair(t *testing.T, opts ...pairOption) *pair {
	t.Helper()
	var c pairConfig
	for _, o := range opts {
		o(&c)
	}
	p := &pair{}
	t.Cleanup(p.close)
	require.NoError(t, p.build(waitCtx(t), c))
	return p
}

// build makes what c says, bounding the waits for a connection by ctx. It
// needs no *testing.T and registers no cleanup: on error, what it made is
// in p (close closes it). A worker that does not Run is progressed while
// it needs to be: the client while it connects through a listener, both
// while the endpoints flush.
func (p *pair) build(ctx context.Context, c pairConfig) (err error) {
	wrap := func(what string, err error) error { return fmt.Errorf("%s: %w", what, err) }
	ctxOpts := c.ctxOpts
	if c.tls != "" {
		ctxOpts = append([]ucp.ContextOption{ucp.WithConfig("TLS", c.tls)}, ctxOpts...)
	}
	if p.ctx, err = ucp.NewContext(ctxOpts...); err != nil {
		return wrap("context", err)
	}
	if p.server, err = p.ctx.NewWorker(); err != nil {
		return wrap("server worker", err)
	}
	if p.client, err = p.ctx.NewWorker(c.clientOpts...); err != nil {
		return wrap("client worker", err)
	}
	if c.runServer {
		p.serverRun = startRun(p.server)
	}
	if c.runClient {
		p.clientRun = startRun(p.client)
	}
	if c.listen || c.connect == byListener {
		if p.listener, err = p.server.Listen("127.0.0.1:0"); err != nil {
			return wrap("listen", err)
		}
	}
	switch c.connect {
	case byAddress:
		if p.saddr, err = p.server.PackAddress(); err != nil {
			return wrap("server address", err)
		}
		if p.ep, err = p.client.ConnectWorker(p.saddr, c.epOpts...); err != nil {
			return wrap("connect to the server's address", err)
		}
		if c.back {
			caddr, err := p.client.PackAddress()
			if err != nil {
				return wrap("client address", err)
			}
			if p.sep, err = p.server.ConnectWorker(caddr, c.epOpts...); err != nil {
				return wrap("connect to the client's address", err)
			}
		}
	case byListener:
		if p.serverRun == nil { // the wire-up needs the server progressed after its Accept
			defer progressWhile(p.server)()
		}
		type accepted struct {
			ep  *ucp.Endpoint
			err error
		}
		acc := make(chan accepted, 1)
		go func() { // Connect returns once the server accepted
			ep, err := p.listener.Accept(ctx, c.epOpts...)
			acc <- accepted{ep, err}
		}()
		p.ep, err = p.client.Connect(ctx, p.listener.Addr().String(), c.epOpts...)
		a := <-acc
		p.sep = a.ep
		if err != nil {
			return wrap("connect", err)
		}
		if a.err != nil {
			return wrap("accept", a.err)
		}
	}
	if c.flush {
		for _, w := range []struct {
			w   *ucp.Worker
			run *workerRun
		}{{p.server, p.serverRun}, {p.client, p.clientRun}} {
			if w.run == nil {
				defer progressWhile(w.w)()
			}
		}
		for _, ep := range []*ucp.Endpoint{p.ep, p.sep} {
			if ep != nil {
				if err = ep.Flush(ctx); err != nil {
					return wrap("flush endpoint", err)
				}
			}
		}
	}
	return nil
}

// close closes what build made, endpoints (forced) first, with both
// workers progressed meanwhile: a force close first flushes an endpoint
// whose handshake no flush has seen complete, which needs the peer's
// progress (else it waits out CloseForce's 1 s grace).
func (p *pair) close() {
	var stops []func()
	for _, w := range []struct {
		w   *ucp.Worker
		run *workerRun
	}{{p.server, p.serverRun}, {p.client, p.clientRun}} {
		if w.w != nil && w.run == nil {
			stops = append(stops, progressWhile(w.w))
		}
	}
	for _, ep := range []*ucp.Endpoint{p.sep, p.ep} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ep.Close(ctx, ucp.CloseForce)
		cancel()
	}
	for _, stop := range stops {
		stop()
	}
	p.listener.Close()
	for _, r := range []*workerRun{p.clientRun, p.serverRun} {
		if r != nil {
			r.stop()
		}
	}
	p.client.Close()
	p.server.Close()
	p.ctx.Close()
}

// allocate maps size bytes of the pair's context (UCX allocates them),
// closed when the test ends.
func (p *pair) allocate(t *testing.T, size int) *ucp.Mem {
	t.Helper()
	m, err := p.ctx.Allocate(size)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// mapTarget maps size bytes in the pair's context and unpacks their key on
// the client's endpoint; both are closed when the test ends.
func (p *pair) mapTarget(t *testing.T, size int) (*ucp.Mem, *ucp.RemoteKey) {
	t.Helper()
	target := p.allocate(t, size)
	return target, unpackOn(t, p.ep, target)
}

// mapRegion is mapTarget with the region calls (PackRegion, UnpackRegion).
func (p *pair) mapRegion(t *testing.T, size int) (*ucp.Mem, ucp.RemoteRegion) {
	t.Helper()
	target := p.allocate(t, size)
	packed, err := target.PackRegion()
	require.NoError(t, err)
	region, err := p.ep.UnpackRegion(waitCtx(t), packed)
	require.NoError(t, err)
	t.Cleanup(func() { region.Key().Close() })
	return target, region
}

// unpackOn packs target's key and unpacks it on ep; the key is closed when
// the test ends.
func unpackOn(t *testing.T, ep *ucp.Endpoint, target *ucp.Mem) *ucp.RemoteKey {
	t.Helper()
	packed, err := target.PackRemoteKey()
	require.NoError(t, err)
	rkey, err := ep.UnpackRemoteKey(waitCtx(t), packed)
	require.NoError(t, err)
	t.Cleanup(func() { rkey.Close() })
	return rkey
}

// workerRun is a worker's Run in a goroutine that refers to nothing else.
type workerRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once Run returned
	err    error         // Run's result, once done is closed
}

func startRun(w *ucp.Worker) *workerRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &workerRun{cancel: cancel, done: make(chan struct{})}
	go func() { r.err = w.Run(ctx); close(r.done) }()
	return r
}

// stop ends the Run and returns its result; a second stop returns it again.
func (r *workerRun) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// runWorker progresses w in a goroutine until the test ends.
func runWorker(t testing.TB, w *ucp.Worker) {
	r := startRun(w)
	t.Cleanup(func() { r.stop() })
}

// progressWhile progresses w from a goroutine until stop is called.
func progressWhile(w *ucp.Worker) (stop func()) {
	return repeat(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		w.Wait(c)
		cancel()
	})
}

// repeat calls f over and over from a goroutine until stop is called;
// stop waits for the call under way.
func repeat(f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				f()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// acceptOne accepts one connection on l (of worker server) in a
// goroutine, as a server does while a client's Connect waits for the
// wire-up, and progresses server until the func it returns, which waits
// for the accepted endpoint, is called.
func acceptOne(t testing.TB, server *ucp.Worker, l *ucp.Listener, opts ...ucp.EndpointOption) func() *ucp.Endpoint {
	stop := progressWhile(server)
	type accepted struct {
		ep  *ucp.Endpoint
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ep, err := l.Accept(ctx, opts...)
		ch <- accepted{ep, err}
	}()
	return func() *ucp.Endpoint {
		a := <-ch
		stop()
		require.NoError(t, a.err, "accept")
		return a.ep
	}
}

// connectAsync runs w.Connect to addr in a goroutine, as a client does
// while the server answers; the func it returns waits for its result.
func connectAsync(w *ucp.Worker, addr string, opts ...ucp.EndpointOption) func() (*ucp.Endpoint, error) {
	type connected struct {
		ep  *ucp.Endpoint
		err error
	}
	ch := make(chan connected, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ep, err := w.Connect(ctx, addr, opts...)
		ch <- connected{ep, err}
	}()
	return func() (*ucp.Endpoint, error) { c := <-ch; return c.ep, c.err }
}

func closeEP(t testing.TB, ep *ucp.Endpoint) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ep.Close(ctx, ucp.CloseForce)
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// onEachTransport runs f in a subtest on each transport, on a pair whose
// server Runs: "shm" (posix,sysv,self, without peer error handling, which
// shared memory lacks) and "tcp" (with it).
func onEachTransport(t *testing.T, f func(t *testing.T, p *pair)) {
	for _, tc := range []struct {
		name, tls string
		peerErr   bool
	}{{"shm", "posix,sysv,self", false}, {"tcp", "tcp", true}} {
		t.Run(tc.name, func(t *testing.T) { f(t, newPair(t, onTLS(tc.tls), withPeerErr(tc.peerErr), runServer())) })
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	onEachTransport(t, func(t *testing.T, p *pair) {
		const size = 16 << 20
		target, rkey := p.mapTarget(t, size)

		local := p.allocate(t, size)
		lb, err := local.Bytes()
		require.NoError(t, err)
		tb, err := target.Bytes()
		require.NoError(t, err)

		for _, n := range []int{8, 4 << 10, 1 << 20, 16 << 20} {
			// From mapped memory.
			copy(lb, pattern(n, 1))
			req, err := putMemAt(local.Range(0, n), target.Address(), rkey)
			require.NoError(t, err)
			require.NoError(t, req.Wait(waitCtx(t)))
			require.NoError(t, p.ep.Flush(waitCtx(t)))
			require.True(t, bytes.Equal(pattern(n, 1), tb[:n]), "put of %d bytes from mapped memory", n)
			clear(lb[:n])
			req, err = getMemAt(local.Range(0, n), target.Address(), rkey)
			require.NoError(t, err)
			require.NoError(t, req.Wait(waitCtx(t)))
			require.True(t, bytes.Equal(pattern(n, 1), lb[:n]), "get of %d bytes into mapped memory", n)

			// From Go slices.
			src := pattern(n, 2)
			req, err = putAt(src, target.Address(), rkey)
			require.NoError(t, err)
			require.NoError(t, req.Wait(waitCtx(t)))
			require.NoError(t, p.ep.Flush(waitCtx(t)))
			require.True(t, bytes.Equal(src, tb[:n]), "put of %d bytes from a slice", n)
			dst := make([]byte, n)
			req, err = getAt(dst, target.Address(), rkey)
			require.NoError(t, err)
			require.NoError(t, req.Wait(waitCtx(t)))
			require.True(t, bytes.Equal(src, dst), "get of %d bytes into a slice", n)
		}
	})
}

// getAt, putAt, getMemAt and putMemAt are RMA at a raw address through rk,
// as a peer that names addresses does: a region of the key (RemoteKey.Region,
// the low layer under UnpackRegion) with the operation at its start.
func getAt(b []byte, addr uint64, rk *ucp.RemoteKey) (ucp.Request, error) {
	r, err := rk.Region(addr, len(b))
	if err != nil {
		return ucp.Request{}, err
	}
	return r.Get(b, 0)
}

func putAt(b []byte, addr uint64, rk *ucp.RemoteKey) (ucp.Request, error) {
	r, err := rk.Region(addr, len(b))
	if err != nil {
		return ucp.Request{}, err
	}
	return r.Put(b, 0)
}

func getMemAt(dst ucp.MemRange, addr uint64, rk *ucp.RemoteKey) (ucp.Request, error) {
	r, err := rk.Region(addr, dst.Len())
	if err != nil {
		return ucp.Request{}, err
	}
	return r.GetMem(dst, 0)
}

func putMemAt(src ucp.MemRange, addr uint64, rk *ucp.RemoteKey) (ucp.Request, error) {
	r, err := rk.Region(addr, src.Len())
	if err != nil {
		return ucp.Request{}, err
	}
	return r.PutMem(src, 0)
}
