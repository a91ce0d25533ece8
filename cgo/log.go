package cgo

/*
#include "ucxgo/shim.h"

// ucxgo_log_pop copies one line into the caller's buffer and keeps no
// pointer to it.
#cgo noescape ucxgo_log_pop
#cgo nocallback ucxgo_log_pop
#cgo nocallback ucxgo_log_route
#cgo nocallback ucxgo_log_inflight
#cgo nocallback ucxgo_log_wake
#cgo nocallback ucxgo_log_ack
#cgo nocallback ucxgo_log_dropped
*/
import "C"

import (
	"syscall"
	"unsafe"
)

// The log shims (cgo/log_shim.c) are the one place this package keeps
// state: a handler on UCX's stack of log handlers, a ring of lines in C
// memory and a pipe that wakes the Go reader. Package ucs drives them.

// LogLine is one line UCX logged, as the C handler recorded it.
type LogLine struct {
	Level     int    // ucs_log_level_t
	File      string // base name of the source file
	Line      uint
	Func      string
	Component string
	Msg       string
	TimeNs    int64  // Unix time in nanoseconds when UCX logged it
	Dropped   uint64 // lines dropped just before this one
}

// LogInstall pushes the handler onto UCX's log handlers (the first call
// only; it stays there) and returns the read end of the wake-up pipe, which
// is non-blocking. errno is ENOSPC when UCX's table of handlers is full.
func LogInstall() (int, error) {
	var pushed C.int
	fd, err := C.ucxgo_log_install(&pushed)
	if fd < 0 {
		if err == nil {
			err = syscall.EINVAL
		}
		return -1, err
	}
	return int(fd), nil
}

// LogRoute turns routing on (lines go to the ring, and the level UCX treats
// as fatal is read again) or off (the handler returns at once, UCX prints).
func LogRoute(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.ucxgo_log_route(v)
}

// LogInflight is the number of handler calls that saw routing on and have
// not returned yet.
func LogInflight() uint { return uint(C.ucxgo_log_inflight()) }

// LogWake makes the pipe readable (unless a wake-up is already pending).
func LogWake() { C.ucxgo_log_wake() }

// LogAck re-arms the wake-up: call it after reading the pipe and before
// taking the lines.
func LogAck() { C.ucxgo_log_ack() }

// LogDropped is the number of lines dropped since the process started.
func LogDropped() uint64 { return uint64(C.ucxgo_log_dropped()) }

// LogPop takes the oldest line from the ring; false when it is empty.
func LogPop() (LogLine, bool) {
	var raw C.ucxgo_log_line_t
	if C.ucxgo_log_pop(&raw) == 0 {
		return LogLine{}, false
	}
	text := unsafe.Slice((*byte)(unsafe.Pointer(&raw.text[0])), len(raw.text))
	take := func(n C.uint16_t) string {
		s := string(text[:int(n)])
		text = text[int(n):]
		return s
	}
	l := LogLine{
		Level:   int(raw.level),
		Line:    uint(raw.line),
		TimeNs:  int64(raw.time_ns),
		Dropped: uint64(raw.dropped),
	}
	l.File = take(raw.file_len)
	l.Func = take(raw.func_len)
	l.Component = take(raw.comp_len)
	l.Msg = take(raw.msg_len)
	return l, true
}
