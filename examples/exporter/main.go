// Command exporter is the host side of the demo, on package share. It
// shares two regions of -size MiB with importers holding its sealing
// secret: "data", read-only, holding a pattern the importer verifies, and
// "inbox", writable, which it checks for the importers' pattern when a
// session ends (the inbox is shared, and cleared when no session is open).
// -rotate-every rotates the grants of "data" under the importers' reads.
// At the end (-serve sessions ended, or SIGINT/SIGTERM) it revokes the
// importers left and reports their acknowledgements. Progress goes to
// stderr, the summary to stdout. Exit status: 0 done, 1 an error (a revoke
// not acknowledged included), 2 bad flags, 4 an inbox did not verify.
//
//	exporter -listen 127.0.0.1:13337 -key-file secret [-size 64] [-serve 1] [-json]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/ucxgo/ucx/examples/internal/demo"
	"github.com/ucxgo/ucx/share"
)

var (
	listen   = flag.String("listen", "127.0.0.1:0", "control address to listen on (port 0 picks one)")
	key      = flag.String("key", "", "the sealing secret, at least 16 bytes (prefer -key-file)")
	keyFile  = flag.String("key-file", "", "file holding the sealing secret (at least 16 bytes)")
	sizeMiB  = flag.Int("size", 64, "MiB in each of the two regions")
	mode     = flag.String("mode", "auto", "auto, export or rkey: auto exports where a memory domain can")
	lease    = flag.Duration("lease", share.DefaultLease, "how long a grant is valid unless rotated")
	serve    = flag.Int("serve", 0, "exit after this many sessions ended, refused ones included (0: at SIGINT/SIGTERM)")
	rotate   = flag.Duration("rotate-every", 0, "rotate the grants of \"data\" this often while importers are connected (0: never)")
	ackWait  = flag.Duration("revoke-timeout", share.DefaultAckTimeout, "how long a revocation waits for an importer's acknowledgement")
	addrFile = flag.String("addr-file", "", "write the listening address to this file once listening")
	asJSON   = flag.Bool("json", false, "print the summary as one JSON line")
	say      = log.New(os.Stderr, "exporter: ", 0).Printf
)

type summary struct {
	Mode          string `json:"mode"`
	Why           string `json:"why"`
	Bytes         int    `json:"bytes_per_region"`
	Served        int64  `json:"importers_served"`
	Refused       int64  `json:"refused"`
	SessionErrors int64  `json:"session_errors"`
	InboxVerified int    `json:"inbox_verified"`
	InboxFailed   int    `json:"inbox_failed"`
	Untouched     int    `json:"inbox_untouched"`
	Rotations     int64  `json:"rotations"`
	Revoked       int64  `json:"revoked_at_exit"`
	Acks          int64  `json:"revoke_acks"`
	Forced        int64  `json:"revoke_forced"`
	Acked         bool   `json:"every_importer_acknowledged"`
}

func main() {
	flag.Parse()
	m, err := demo.ParseMode(*mode)
	sealer, serr := demo.Sealer(*key, *keyFile)
	if err = errors.Join(err, serr); err == nil && *sizeMiB < 1 {
		err = fmt.Errorf("-size %d: at least 1 MiB", *sizeMiB)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "exporter:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, sealer, m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "exporter:", err)
	}
	os.Exit(code)
}

func run(ctx context.Context, sealer share.Sealer, m share.Mode) (int, error) {
	size := *sizeMiB << 20
	// Shared memory comes from share.NewMemory; it can be closed once the
	// exporter is (deferred calls run last first).
	dataMem, err := share.NewMemory(size)
	if err != nil {
		return 1, err
	}
	defer dataMem.Close()
	inboxMem, err := share.NewMemory(size)
	if err != nil {
		return 1, err
	}
	defer inboxMem.Close()
	data, inbox := dataMem.Bytes(), inboxMem.Bytes()
	demo.Fill(data, demo.DataSeed)
	events := make(chan share.Event, 256) // a session's events: this program's only view of them
	e, err := share.NewExporter(sealer, share.WithMode(m), share.WithLease(*lease), share.WithAckTimeout(*ackWait), share.WithEvents(events))
	if err != nil {
		return 1, err
	}
	defer e.Close()
	if err := errors.Join(e.Add(ctx, "data", dataMem, share.ReadOnly), e.Add(ctx, "inbox", inboxMem, share.WriteOnly)); err != nil {
		return 1, err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return 1, err
	}
	go e.Serve(l) // until l is closed
	mode, why := e.Mode()
	sum := summary{Mode: mode.String(), Why: why, Bytes: size}
	say("listening on %s, sharing data (read-only) and inbox (writable), %d MiB each; mode %s: %s", l.Addr(), *sizeMiB, mode, why)
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(l.Addr().String()+"\n"), 0o644); err != nil {
			return 1, err
		}
	}

	// Sessions come as events; the inbox is checked at their end.
	open := map[share.SessionID]bool{}
	refused := 0
	handle := func(ev share.Event) {
		switch ev.Kind {
		case share.EventOpened:
			open[ev.Session] = true
			say("%v", ev)
		case share.EventRefused:
			refused++
			say("%v", ev)
		case share.EventEnded:
			delete(open, ev.Session)
			what := "inbox verified"
			if err := demo.Verify(inbox, demo.InboxSeed); err == nil {
				sum.InboxVerified++
			} else if slices.ContainsFunc(inbox, func(b byte) bool { return b != 0 }) {
				what, sum.InboxFailed = "inbox FAILED: "+err.Error(), sum.InboxFailed+1
			} else {
				what, sum.Untouched = "inbox untouched", sum.Untouched+1
			}
			say("%v; %s", ev, what)
			if len(open) == 0 {
				clear(inbox)
			}
		case share.EventExpired:
			say("%v", ev)
		}
		// EventAcknowledged: one per rotation of each session; counted in Stats.
	}
	rotations := time.Tick(*rotate) // nil: never
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-rotations:
			if len(open) > 0 {
				rctx, cancel := context.WithTimeout(context.Background(), *ackWait)
				if rev, err := e.Rotate(rctx, "data", *ackWait); err != nil {
					say("rotate: %v (unmapped without acknowledgement in sessions %v)", err, rev.Forced)
				}
				cancel()
			}
		case ev := <-events:
			handle(ev)
		}
		// Sessions ended: refused at the handshake, or opened and checked.
		done = done || *serve > 0 && refused+sum.InboxVerified+sum.InboxFailed+sum.Untouched >= *serve
	}

	l.Close() // the end: no new sessions; those left are revoked and waited for
	before := e.Stats()
	rctx, cancel := context.WithTimeout(context.Background(), *ackWait)
	rev, rerr := e.Revoke(rctx)
	cancel()
	after := e.Stats()
	held := int64(0)
	for _, s := range before.Sessions {
		held += s.Live
	}
	sum.Revoked, sum.Acks, sum.Forced = before.Importers, after.Acks-before.Acks, int64(len(rev.Forced))
	sum.Served, sum.Refused, sum.SessionErrors, sum.Rotations = after.Served, after.Refused, after.Errors, after.Rotations
	sum.Acked = rerr == nil && len(rev.Forced) == 0 && len(rev.Ended) == 0
	say("revoke at exit: %d importer(s) holding %d registration(s): %d acknowledgement(s), %d closed by force; every importer acknowledged: %t",
		sum.Revoked, held, sum.Acks, sum.Forced, sum.Acked)
	for len(open) > 0 { // each revoked session ends: its importer closes, or is closed by force
		handle(<-events)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(sum)
	} else {
		fmt.Printf("exporter: served %d importer(s) (%d refused, %d ended with an error); inbox verified %d, failed %d; %d rotation(s); revoked %d at exit (%d acknowledgement(s), %d closed by force)\n",
			sum.Served, sum.Refused, sum.SessionErrors, sum.InboxVerified, sum.InboxFailed, sum.Rotations, sum.Revoked, sum.Acks, sum.Forced)
	}
	if sum.InboxFailed > 0 {
		return 4, fmt.Errorf("%d inbox verification(s) failed", sum.InboxFailed)
	}
	if !sum.Acked {
		return 1, errors.Join(rerr, errors.New("not every importer acknowledged the revoke"))
	}
	return 0, nil
}
