package share

import (
	"fmt"
	"log/slog"
	"time"
)

// EventKind says what happened to a session.
type EventKind uint8

const (
	// EventOpened: an importer proved the secret; its session is open and
	// its grants are on their way.
	EventOpened EventKind = iota + 1
	// EventRefused: a connection's handshake failed (Err says why), or the
	// connection was closed unanswered over a handshake limit (Err wraps
	// ErrRefused; Session is zero, as no session was made).
	EventRefused
	// EventAcknowledged: the importer dropped a generation of Region it was
	// asked to (Remove, Rotate, Revoke, a lease's expiry).
	EventAcknowledged
	// EventExpired: the lease of a grant of Region ended; the importer is
	// asked to drop it.
	EventExpired
	// EventEnded: the session ended (Err nil: the importer closed, or the
	// exporter did, cleanly). It is the session's last event.
	EventEnded
)

func (k EventKind) String() string {
	switch k {
	case EventOpened:
		return "opened"
	case EventRefused:
		return "refused"
	case EventAcknowledged:
		return "acknowledged"
	case EventExpired:
		return "expired"
	case EventEnded:
		return "ended"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something that happened to an exporter's session (WithEvents).
// Nothing in it is secret.
type Event struct {
	Kind    EventKind
	Time    time.Time
	Session SessionID // zero for a connection refused before it became one
	Remote  string    // the importer's address, as the control connection says
	Region  string    // EventAcknowledged, EventExpired
	Err     error     // EventRefused: why; EventEnded: the error it ended with, if any
}

func (ev Event) String() string {
	s := ev.Kind.String() + " session " + ev.Session.String() + " from " + ev.Remote
	if ev.Region != "" {
		s += " region " + ev.Region
	}
	if ev.Err != nil {
		s += ": " + ev.Err.Error()
	}
	return s
}

// WithEvents sends the exporter's session events to ch, for a program to
// select on. A send never blocks the exporter: an event that finds ch full
// is dropped and counted (ExporterStats.EventsDropped), so give ch the
// room the program needs (a flood of refused connections can fill it).
// Every session sends one EventOpened or EventRefused first and, once
// opened, one EventEnded last.
func WithEvents(ch chan<- Event) ExporterOption {
	return exporterOption(func(o *exporterOptions) { o.events = ch })
}

// emit sends ev if the exporter has an events channel.
func (e *Exporter) emit(ev Event) {
	e.logEvent(ev)
	if e.o.events == nil {
		return
	}
	ev.Time = time.Now()
	select {
	case e.o.events <- ev:
	default:
		e.st.eventsDropped.Add(1)
	}
}

// event is an event of session s.
func (s *Session) event(k EventKind, region string, err error) {
	if s.e.o.events == nil && !s.e.lg.on() {
		return
	}
	s.e.emit(Event{Kind: k, Session: s.ID(), Remote: s.conn.RemoteAddr().String(), Region: region, Err: err})
}

// isClosed reports whether Close has begun.
func (e *Exporter) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// logEvent is ev's line (WithLogger).
func (e *Exporter) logEvent(ev Event) {
	if !e.lg.on() {
		return
	}
	remote := slog.String("remote", ev.Remote)
	switch ev.Kind {
	case EventRefused:
		e.lg.refusal("share: connection refused", append([]slog.Attr{remote}, errAttr(ev.Err)...)...)
		return
	case EventOpened:
		e.lg.log(slog.LevelInfo, "share: session opened", slog.String("session", ev.Session.String()), remote)
	case EventAcknowledged:
		e.lg.log(slog.LevelInfo, "share: acknowledged", slog.String("session", ev.Session.String()), remote, slog.String("region", ev.Region))
	case EventExpired:
		e.lg.log(slog.LevelInfo, "share: lease expired", slog.String("session", ev.Session.String()), remote, slog.String("region", ev.Region))
	case EventEnded:
		level := slog.LevelInfo
		if ev.Err != nil {
			level = slog.LevelWarn
		}
		e.lg.log(level, "share: session ended", append([]slog.Attr{slog.String("session", ev.Session.String()), remote}, errAttr(ev.Err)...)...)
	}
}

// sessionAttr and remoteAttr are the attributes of s's lines.
func (s *Session) sessionAttr() slog.Attr { return slog.String("session", s.ID().String()) }
func (s *Session) remoteAttr() slog.Attr  { return slog.String("remote", s.conn.RemoteAddr().String()) }
