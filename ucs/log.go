package ucs

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ucxgo/ucx/cgo"
)

// The attribute keys of a record SetLogger's logger receives. The record's
// message is UCX's text of the line, and its time when UCX logged it.
const (
	LogKeyLevel     = "ucx_level"     // UCX's level name: ERROR, WARN, DIAG, INFO, DEBUG, TRACE, REQ, DATA, ASYNC, FUNC, POLL or PRINT
	LogKeyFile      = "ucx_file"      // base name of UCX's source file, e.g. "parser.c"
	LogKeyLine      = "ucx_line"      // line in that file (int)
	LogKeyFunc      = "ucx_func"      // UCX's function
	LogKeyComponent = "ucx_component" // UCX's log component, e.g. "UCX"; absent when UCX names none
	LogKeyDropped   = "ucx_dropped"   // lines dropped just before this one (uint64); absent when none
)

// SetLogger routes UCX's log lines to l, or to slog.Default() (as it is
// when each line is delivered) when l is nil; it replaces the logger of an
// earlier call. While it is in effect, every line UCX logs at a level
// UCX_LOG_LEVEL enables (warn by default) becomes one slog record, with the
// attributes of the LogKey constants, and UCX does not print it itself.
// Levels map so:
//
//	UCX            slog
//	ERROR          LevelError
//	WARN           LevelWarn
//	DIAG, INFO     LevelInfo
//	DEBUG          LevelDebug
//	TRACE          LevelDebug-4
//	REQ ... POLL   LevelDebug-5 ... LevelDebug-9 (DATA -6, ASYNC -7, FUNC -8)
//	PRINT          LevelInfo
//
// UCX_LOG_LEVEL decides which lines UCX produces, the logger's handler
// which it keeps; UCX_LOG_FILE_FILTER still applies. A message is cut after
// 1023 bytes. Lines UCX logged before the first SetLogger (as libucx loads,
// say) were printed by UCX. Lines are UCX's text as UCX wrote it: at TRACE
// and finer levels they can hold packed remote keys in hex, so treat a log
// at those levels as secret.
//
// Fatal lines are not routed: UCX aborts the process right after a FATAL
// line, or one as severe as UCX_LOG_LEVEL_TRIGGER (read when SetLogger is
// called), before any goroutine could deliver it. UCX prints it itself, and
// the lines still waiting for the logger are first written to stderr, one
// each as "ucx-go: UCX LEVEL file:line message". UCX's assertion failures
// and other fatal errors bypass its log handlers and go to stderr as
// before; lines logged just before such an abort may be lost.
//
// No Go code runs on the thread that logs (UCX logs from its own threads
// and with its locks held): a C handler formats each line into a bounded
// buffer in C memory and a goroutine hands the lines to the logger, in
// order, one at a time. A line that finds the buffer full (the logger is
// slower than UCX) or held too long by another is dropped, never waited
// for: LogsDropped counts them, and the next delivered record carries the
// count since the previous one as ucx_dropped.
//
// SetLogger, ResetLogger and LogsDropped may be called from any goroutine,
// also from within the logger's handler.
func SetLogger(l *slog.Logger) {
	logState.mu.Lock()
	defer logState.mu.Unlock()
	if logState.pipe == nil {
		fd, err := cgo.LogInstall()
		if err != nil {
			if l == nil {
				l = slog.Default()
			}
			l.Warn("ucx: cannot route UCX's log lines; UCX goes on printing them", "error", err)
			return
		}
		logState.pipe = os.NewFile(uintptr(fd), "ucx-log-wakeup")
	}
	logTarget.Store(l)
	logState.stop = false
	if !logState.running {
		logState.running = true
		go drainLogs(logState.pipe)
	}
	cgo.LogRoute(true)
}

// ResetLogger gives UCX its own printing back (to stdout, or UCX_LOG_FILE).
// Lines UCX logged before it are still delivered to the logger SetLogger
// set, shortly after it returns; none after. Without SetLogger it does
// nothing.
func ResetLogger() {
	logState.mu.Lock()
	defer logState.mu.Unlock()
	if logState.pipe == nil || !logState.running {
		return
	}
	cgo.LogRoute(false)
	logState.stop = true
	logState.gen++
	cgo.LogWake()
}

// LogsDropped is the number of UCX log lines dropped since the process
// started, the logger SetLogger set not keeping up (see SetLogger).
func LogsDropped() uint64 { return cgo.LogDropped() }

var logState struct {
	mu      sync.Mutex
	pipe    *os.File // wake-up pipe's read end, once installed (never closed)
	running bool     // a drainLogs goroutine runs
	stop    bool     // ResetLogger asked it to end
	gen     uint64   // ResetLogger calls
}

// logTarget is the logger lines go to; nil means slog.Default().
var logTarget atomic.Pointer[slog.Logger]

// drainLogs hands the C ring's lines to the logger whenever the handler
// wakes it, until ResetLogger asks it to end; then it waits for handler
// calls still under way and delivers their lines before ending.
func drainLogs(pipe *os.File) {
	var d logDelivery
	var buf [64]byte
	for {
		if _, err := pipe.Read(buf[:]); err != nil {
			// Not expected (the write end is never closed): leave the lines
			// to UCX rather than spin.
			logState.mu.Lock()
			cgo.LogRoute(false)
			logState.running = false
			logState.mu.Unlock()
			return
		}
		cgo.LogAck()
		d.all()
		logState.mu.Lock()
		stop, gen := logState.stop, logState.gen
		logState.mu.Unlock()
		if !stop {
			continue
		}
		// Routing is off: a handler that saw it on is still writing its
		// line; it takes a few microseconds.
		for cgo.LogInflight() != 0 {
			time.Sleep(20 * time.Microsecond)
		}
		d.all()
		logState.mu.Lock()
		if logState.stop && logState.gen == gen {
			logState.running = false
			logState.mu.Unlock()
			return
		}
		logState.mu.Unlock() // SetLogger or ResetLogger came meanwhile
	}
}

// logDelivery carries the count of dropped lines to the next record the
// logger takes.
type logDelivery struct{ dropped uint64 }

func (d *logDelivery) all() {
	for {
		line, ok := cgo.LogPop()
		if !ok {
			return
		}
		d.deliver(line)
	}
}

func (d *logDelivery) deliver(line cgo.LogLine) {
	d.dropped += line.Dropped
	l := logTarget.Load()
	if l == nil {
		l = slog.Default()
	}
	level := slogLevel(line.Level)
	h := l.Handler()
	ctx := context.Background()
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Unix(0, line.TimeNs), level, line.Msg, 0)
	r.AddAttrs(
		slog.String(LogKeyLevel, ucxLevelName(line.Level)),
		slog.String(LogKeyFile, line.File),
		slog.Int(LogKeyLine, int(line.Line)),
		slog.String(LogKeyFunc, line.Func),
	)
	if line.Component != "" {
		r.AddAttrs(slog.String(LogKeyComponent, line.Component))
	}
	if d.dropped != 0 {
		r.AddAttrs(slog.Uint64(LogKeyDropped, d.dropped))
		d.dropped = 0
	}
	_ = h.Handle(ctx, r) // a handler's error has nowhere better to go
}

// UCX's ucs_log_level_t values (the same in every supported release).
const (
	ucxFatal = iota
	ucxError
	ucxWarn
	ucxDiag
	ucxInfo
	ucxDebug
	ucxTrace // then REQ, DATA, ASYNC, FUNC, POLL
	ucxPoll  = ucxTrace + 5
	ucxPrint = ucxPoll + 2
)

var ucxLevelNames = [...]string{"FATAL", "ERROR", "WARN", "DIAG", "INFO", "DEBUG",
	"TRACE", "REQ", "DATA", "ASYNC", "FUNC", "POLL"}

func ucxLevelName(level int) string {
	switch {
	case level == ucxPrint:
		return "PRINT"
	case level >= 0 && level < len(ucxLevelNames):
		return ucxLevelNames[level]
	}
	return "?"
}

func slogLevel(level int) slog.Level {
	switch {
	case level == ucxFatal:
		return slog.LevelError + 4
	case level == ucxError:
		return slog.LevelError
	case level == ucxWarn:
		return slog.LevelWarn
	case level == ucxDiag, level == ucxInfo, level == ucxPrint:
		return slog.LevelInfo
	case level == ucxDebug:
		return slog.LevelDebug
	case level >= ucxTrace && level <= ucxPoll:
		return slog.LevelDebug - 4 - slog.Level(level-ucxTrace)
	}
	return slog.LevelDebug - 4
}
