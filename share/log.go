package share

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ucxgo/ucx/internal/datapath"
)

// WithLogger makes the side log what a person on call wants to know, one
// structured line per happening, to l (default: no lines). At the
// exporter: a session opened, refused (why, and from where), throttled,
// a grant made, a revocation sent (why), an acknowledgement, a lease's
// expiry, a rotation, a registration unmapped without acknowledgement, a
// session ended (with its error), a data-path process started and ended.
// At the importer: the session opened, a grant taken, a revocation, the
// acknowledgement, the session ended, its data-path process started and
// ended. Every line of a session carries its id as "session", the same on
// both sides (Session.ID, Importer.SessionID); the exporter's lines carry
// the importer's address as "remote".
//
// No line carries a secret, a key, a grant's sealed bytes or an address
// in the shared memory. The lines a connection can cause before it proves
// the secret (refused, throttled) are limited to LogRefusalsPerSecond;
// the next line logged after some were suppressed says how many
// ("suppressed").
func WithLogger(l *slog.Logger) Option {
	return option{
		func(o *exporterOptions) { o.log = l },
		func(o *importerOptions) { o.log = l },
	}
}

// LogRefusalsPerSecond bounds the lines an exporter logs for connections
// that did not prove the secret (WithLogger).
const LogRefusalsPerSecond = 10

// logger is a side's WithLogger: nil-safe, and limiting the lines of
// unauthenticated connections.
type logger struct {
	l *slog.Logger

	mu         sync.Mutex
	window     time.Time // the second the refusals are counted in
	inWindow   int
	suppressed int
}

func newLogger(l *slog.Logger) *logger { return &logger{l: l} }

func (g *logger) on() bool { return g != nil && g.l != nil }

// log writes one line at level.
func (g *logger) log(level slog.Level, msg string, attrs ...slog.Attr) {
	if !g.on() {
		return
	}
	g.l.LogAttrs(context.Background(), level, msg, attrs...)
}

// refusal writes a line caused by a connection that did not prove the
// secret, unless LogRefusalsPerSecond were written this second already.
func (g *logger) refusal(msg string, attrs ...slog.Attr) {
	if !g.on() {
		return
	}
	g.mu.Lock()
	now := time.Now()
	if now.Sub(g.window) >= time.Second {
		g.window, g.inWindow = now, 0
	}
	if g.inWindow >= LogRefusalsPerSecond {
		g.suppressed++
		g.mu.Unlock()
		return
	}
	g.inWindow++
	n := g.suppressed
	g.suppressed = 0
	g.mu.Unlock()
	if n > 0 {
		attrs = append(attrs, slog.Int("suppressed", n))
	}
	g.l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}

// errAttr is err as the line's "err" attribute (nothing for nil).
func errAttr(err error) []slog.Attr {
	if err == nil {
		return nil
	}
	return []slog.Attr{slog.String("err", err.Error())}
}

// dataPath logs a session's data-path process started, and ended when it
// ends.
func (g *logger) dataPath(dp *datapath.Proc, attrs ...slog.Attr) {
	if !g.on() {
		return
	}
	attrs = append(attrs, slog.Int("pid", dp.Pid()))
	g.log(slog.LevelInfo, "share: data path started", attrs...)
	go func() {
		<-dp.Done()
		g.log(slog.LevelInfo, "share: data path ended", append(attrs, slog.String("exit", exitText(dp.Err())))...)
	}()
}

// exitText is how a data-path process ended (Proc.Err).
func exitText(err error) string {
	if err == nil {
		return "exited"
	}
	return err.Error()
}
