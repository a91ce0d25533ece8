// Command exporter is the host side of the exported-key demo: it maps
// memory, fills it with a verifiable pattern, listens for importers and
// sends each an authenticated envelope carrying an exported descriptor (or,
// where the host cannot export, a packed rkey). Before it unmaps, it revokes
// the key at every importer and waits, bounded, for their acknowledgements.
//
//	exporter -listen 127.0.0.1:13337 -size 64 -key-file secret [-serve 1]
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ucxgo/ucx/examples/envelope"
	"github.com/ucxgo/ucx/examples/internal/demo"
	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

type config struct {
	listen        string
	sizeMiB       int
	source        string
	mode          string
	secret        []byte
	lease         time.Duration
	serve         int
	revokeTimeout time.Duration
	addrFile      string
	json          bool
	fault         string
}

func main() {
	var c config
	var key, keyFile string
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "address to listen on (port 0 picks one)")
	flag.IntVar(&c.sizeMiB, "size", 64, "MiB to export")
	flag.StringVar(&c.source, "source", "alloc", "memory: alloc (UCX allocates), go (a registered Go buffer) or file:PATH (a file mapped and registered)")
	flag.StringVar(&c.mode, "mode", "auto", "auto, export or rkey: auto exports where a memory domain can")
	flag.StringVar(&key, "key", "", "HMAC key for the envelope")
	flag.StringVar(&keyFile, "key-file", "", "file holding the HMAC key")
	flag.DurationVar(&c.lease, "lease", 10*time.Minute, "how long an envelope is valid")
	flag.IntVar(&c.serve, "serve", 0, "exit after this many importers finished (0: until SIGINT/SIGTERM)")
	flag.DurationVar(&c.revokeTimeout, "revoke-timeout", 5*time.Second, "how long to wait for importers to acknowledge a revoke")
	flag.StringVar(&c.addrFile, "addr-file", "", "write the listening address to this file once listening")
	flag.BoolVar(&c.json, "json", false, "print the summary as JSON")
	flag.StringVar(&c.fault, "fault", "", "fault injection for tests: send the first importer an envelope with bad magic, version, hmac, truncated, or an invalid descriptor")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags]\n\nExports host memory to importers (the DPU side).\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	secret, err := loadSecret(key, keyFile)
	if err != nil {
		fatal(err)
	}
	c.secret = secret
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "exporter:", err)
	os.Exit(1)
}

func loadSecret(key, file string) ([]byte, error) {
	switch {
	case key != "" && file != "":
		return nil, errors.New("give -key or -key-file, not both")
	case key != "":
		return []byte(key), nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("%s is empty", file)
		}
		return b, nil
	}
	return nil, errors.New("an HMAC key is required (-key or -key-file)")
}

// session is one connected importer.
type session struct {
	id    int
	ep    *ucp.Endpoint
	from  string
	acked chan struct{}
	once  sync.Once
}

type summary struct {
	Mode      string `json:"mode"`
	Why       string `json:"why"`
	Address   string `json:"listen"`
	Bytes     int    `json:"bytes"`
	Served    int    `json:"importers_served"`
	Verified  int    `json:"verifications_passed"`
	Failed    int    `json:"verifications_failed"`
	Revoked   int    `json:"revoked"`
	Unacked   int    `json:"revokes_unacknowledged"`
	Malformed int    `json:"bad_messages"`
}

func run(ctx context.Context, c config) error {
	mode, why, features, err := chooseMode(c.mode)
	if err != nil {
		return err
	}
	uctx, err := ucp.NewContext(ucp.WithFeatures(features))
	if err != nil {
		return err
	}
	defer uctx.Close()
	w, err := uctx.NewWorker()
	if err != nil {
		return err
	}
	defer w.Close()

	size := c.sizeMiB << 20
	mem, release, err := mapMemory(uctx, c.source, size)
	if err != nil {
		return err
	}
	defer release()
	b, err := mem.Bytes()
	if err != nil {
		return err
	}
	demo.Fill(b[:size], 1)

	var key []byte
	if mode == envelope.ModeExport {
		key, err = mem.Export()
		if err != nil {
			return fmt.Errorf("export mode: %w", err)
		}
	} else {
		key, err = mem.PackRemoteKey()
		if err != nil {
			return err
		}
	}

	l, err := w.Listen(c.listen)
	if err != nil {
		return err
	}
	defer l.Close()
	sum := summary{Mode: mode.String(), Why: why, Address: l.Addr().String(), Bytes: size}
	if !c.json {
		fmt.Printf("exporter: listening on %s, %d MiB from %s\n", l.Addr(), c.sizeMiB, c.source)
		fmt.Printf("exporter: mode %s: %s\n", mode, why)
	}
	if c.addrFile != "" {
		if err := os.WriteFile(c.addrFile, []byte(l.Addr().String()+"\n"), 0o644); err != nil {
			return err
		}
	}

	var id [16]byte
	rand.Read(id[:])
	var mu sync.Mutex
	sessions := map[*ucp.Endpoint]*session{}
	// Handlers must not block: they count finished importers and nudge the
	// main loop without waiting.
	var finishedCount atomic.Int64
	finished := make(chan struct{}, 1)

	// The importer asks the exporter to check what it wrote.
	err = w.SetAMHandler(demo.AMVerify, func(m *ucp.AMMessage) {
		seed, n, perr := demo.ParseVerifyHeader(m.Header)
		reply := m.Reply()
		if reply == nil {
			return
		}
		ok, msg := byte(0), ""
		switch {
		case perr != nil:
			msg = perr.Error()
		case n > uint64(size):
			msg = fmt.Sprintf("length %d exceeds the %d-byte region", n, size)
		default:
			if verr := demo.Verify(b[:n], seed); verr != nil {
				msg = verr.Error()
			} else {
				ok, msg = 1, fmt.Sprintf("%d bytes match pattern %d", n, seed)
			}
		}
		mu.Lock()
		if ok == 1 {
			sum.Verified++
		} else {
			sum.Failed++
		}
		mu.Unlock()
		if req, err := reply.SendAM(demo.AMResult, []byte{ok}, []byte(msg), 0); err == nil {
			req.Detach()
		}
	})
	if err != nil {
		return err
	}
	err = w.SetAMHandler(demo.AMAck, func(m *ucp.AMMessage) {
		mu.Lock()
		s := sessions[m.Reply()]
		mu.Unlock()
		if s != nil {
			s.once.Do(func() {
				close(s.acked)
				finishedCount.Add(1)
				select {
				case finished <- struct{}{}:
				default:
				}
			})
		}
	})
	if err != nil {
		return err
	}

	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); w.Run(runCtx) }()
	defer func() { stopRun(); <-runDone }()

	// Accept importers until told to stop.
	acceptCtx, stopAccept := context.WithCancel(ctx)
	defer stopAccept()
	go func() {
		for n := 1; ; n++ {
			cr, err := l.AcceptRequest(acceptCtx)
			if err != nil {
				return
			}
			ep, err := cr.Accept()
			if err != nil {
				fmt.Fprintln(os.Stderr, "exporter: accept:", err)
				continue
			}
			s := &session{id: n, ep: ep, from: cr.ClientAddr().String(), acked: make(chan struct{})}
			env, err := envelope.Seal(&envelope.Envelope{
				UCXMajor: uint8(ucs.LoadedVersion().Major), UCXMinor: uint8(ucs.LoadedVersion().Minor), UCXPatch: uint8(ucs.LoadedVersion().Patch),
				ExporterID: id, Address: mem.Address(), Length: uint64(size), Prot: uint32(ucp.ProtAll),
				Mode: mode, Issued: time.Now(), Expires: time.Now().Add(c.lease), Key: key,
			}, c.secret)
			if err != nil {
				fmt.Fprintln(os.Stderr, "exporter:", err)
				ep.Close(context.Background(), ucp.CloseForce)
				continue
			}
			if n == 1 && c.fault == "descriptor" {
				// An authentic envelope around a descriptor that is not one.
				bogus := append([]byte{43}, make([]byte, 60)...)
				env, err = envelope.Seal(&envelope.Envelope{Address: mem.Address(), Length: uint64(size),
					Mode: envelope.ModeExport, Issued: time.Now(), Expires: time.Now().Add(c.lease), Key: bogus}, c.secret)
				if err != nil {
					fmt.Fprintln(os.Stderr, "exporter:", err)
				}
			} else if n == 1 && c.fault != "" {
				env = injectFault(env, c.fault)
			}
			mu.Lock()
			sessions[ep] = s
			sum.Served++
			mu.Unlock()
			if !c.json {
				fmt.Printf("exporter: importer %d connected from %s\n", s.id, s.from)
			}
			if req, err := ep.SendAM(demo.AMEnvelope, nil, env, 0); err == nil {
				req.Detach()
			}
			// A dead importer is dropped; the others are served on.
			go func() {
				select {
				case <-ep.Failed():
					// The session stays known: an acknowledgement sent just
					// before the importer left may still be dispatched.
					if !c.json {
						fmt.Printf("exporter: importer %d gone: %v\n", s.id, ep.Err())
					}
					ep.Close(context.Background(), ucp.CloseForce)
				case <-runCtx.Done():
				}
			}()
		}
	}()

	// Wait for the end: a signal, or -serve importers finished.
	for c.serve == 0 || finishedCount.Load() < int64(c.serve) {
		select {
		case <-ctx.Done():
			goto shutdown
		case <-finished:
		}
	}
shutdown:
	stopAccept()
	mu.Lock()
	live := make([]*session, 0, len(sessions))
	for _, s := range sessions {
		live = append(live, s)
	}
	mu.Unlock()
	sum.Revoked, sum.Unacked = revoke(live, c.revokeTimeout)
	if c.json {
		return json.NewEncoder(os.Stdout).Encode(sum)
	}
	fmt.Printf("exporter: served %d importer(s), %d verification(s) passed, %d failed; revoked %d (%d unacknowledged); unmapping\n",
		sum.Served, sum.Verified, sum.Failed, sum.Revoked, sum.Unacked)
	if sum.Failed > 0 {
		return fmt.Errorf("%d verification(s) failed", sum.Failed)
	}
	return nil
}

// revoke tells every importer that still holds the key to drop it and waits
// for the acknowledgements (bounded), then closes the endpoints.
func revoke(live []*session, timeout time.Duration) (revoked, unacked int) {
	deadline := time.After(timeout)
	for _, s := range live {
		select {
		case <-s.acked: // already done with the key
			continue
		default:
		}
		if req, err := s.ep.SendAM(demo.AMRevoke, nil, nil, 0); err == nil {
			revoked++
			req.Detach()
		}
	}
	for _, s := range live {
		select {
		case <-s.acked:
		case <-s.ep.Failed():
		case <-deadline:
			unacked++
		}
	}
	for _, s := range live {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		s.ep.Close(ctx, ucp.CloseFlush)
		cancel()
	}
	return revoked, unacked
}

// chooseMode decides between export and rkey, and says why.
func chooseMode(want string) (envelope.Mode, string, ucp.Feature, error) {
	base := ucp.FeatureRMA | ucp.FeatureAM
	err := uct.HaveExportedMkey()
	switch want {
	case "rkey":
		return envelope.ModeRkey, "rkey mode requested", base, nil
	case "export", "auto":
		if err == nil {
			return envelope.ModeExport, "a memory domain here can export (`doctor` names it)", base | ucp.FeatureExportedMemh, nil
		}
		if want == "export" || !errors.Is(err, ucs.ErrUnsupported) {
			return 0, "", 0, fmt.Errorf("export mode unavailable: %w", err)
		}
		return envelope.ModeRkey, "no memory domain here can export memory keys (none has UCT_MD_FLAG_EXPORTED_MKEY; `doctor` lists why for each), so rkey mode", base, nil
	}
	return 0, "", 0, fmt.Errorf("unknown -mode %q (auto, export, rkey)", want)
}

// mapMemory maps size bytes from the chosen source.
func mapMemory(ctx *ucp.Context, source string, size int) (*ucp.Mem, func(), error) {
	switch {
	case source == "alloc":
		m, err := ctx.Allocate(size)
		if err != nil {
			return nil, nil, err
		}
		return m, func() { m.Close() }, nil
	case source == "go":
		m, err := ctx.Register(make([]byte, size))
		if err != nil {
			return nil, nil, err
		}
		return m, func() { m.Close() }, nil
	case len(source) > 5 && source[:5] == "file:":
		f, err := os.OpenFile(source[5:], os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		if err := f.Truncate(int64(size)); err != nil {
			return nil, nil, err
		}
		region, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			return nil, nil, err
		}
		m, err := ctx.RegisterPointer(unsafePointer(region), size)
		if err != nil {
			syscall.Munmap(region)
			return nil, nil, err
		}
		return m, func() { m.Close(); syscall.Munmap(region) }, nil
	}
	return nil, nil, fmt.Errorf("unknown -source %q (alloc, go, file:PATH)", source)
}

// injectFault spoils an envelope the way a broken or hostile exporter would.
func injectFault(env []byte, fault string) []byte {
	env = append([]byte(nil), env...)
	switch fault {
	case "magic":
		env[0] ^= 0xff
	case "version":
		env[8]++
	case "hmac":
		env[len(env)/2] ^= 1
	case "truncated":
		env = env[:len(env)-7]
	}
	return env
}
