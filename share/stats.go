package share

import (
	"sync/atomic"
	"time"

	"github.com/ucxgo/ucx/internal/counters"
	"github.com/ucxgo/ucx/ucs"
)

// ExporterStats are an exporter's counters since NewExporter. The
// exporter cannot count the bytes importers move: RMA is one-sided, so
// the importer's ImporterStats count them.
type ExporterStats struct {
	Mode          string         `json:"mode"`           // the mode it runs in (Exporter.Mode)
	Regions       int64          `json:"regions"`        // shared now
	Importers     int64          `json:"importers"`      // sessions open now
	Served        int64          `json:"served"`         // sessions accepted in all
	Ended         int64          `json:"ended"`          // sessions ended in all (refused ones among them)
	Refused       int64          `json:"refused"`        // sessions refused at the handshake
	Throttled     int64          `json:"throttled"`      // connections closed unanswered over a handshake limit (Limits)
	Grants        int64          `json:"grants"`         // grants sent (one registration each)
	Revocations   int64          `json:"revocations"`    // revocations sent
	Expired       int64          `json:"expired"`        // of which for an expired lease
	Rotations     int64          `json:"rotations"`      // Rotate calls
	Acks          int64          `json:"acks"`           // acknowledgements received
	Forced        int64          `json:"forced"`         // sessions ended by force while holding registrations
	ForcedUnmaps  int64          `json:"forced_unmaps"`  // registrations unmapped without an acknowledgement (Remove, Rotate at ctx's end)
	Errors        int64          `json:"errors"`         // sessions that ended with an error
	EventsDropped int64          `json:"events_dropped"` // events that found the WithEvents channel full
	Sessions      []SessionStats `json:"sessions"`       // one per session open now
}

// SessionStats are one importer's session at the exporter.
type SessionStats struct {
	ID          string        `json:"id"`                 // Session.ID, the importer's Importer.SessionID`
	Remote      string        `json:"remote"`             // the importer's address, as the control connection says
	UCX         string        `json:"ucx"`                // the importer's UCX release
	Grants      int64         `json:"grants"`             // grants sent to it
	Revocations int64         `json:"revocations"`        // revocations sent to it
	Acks        int64         `json:"acks"`               // its acknowledgements
	Live        int64         `json:"live_registrations"` // registrations it can reach now
	LeaseAge    time.Duration `json:"lease_age_ns"`       // age of its oldest live grant
	Errors      int64         `json:"errors"`             // 1 if it ended with an error
}

// ImporterStats are an importer's counters since Dial.
type ImporterStats struct {
	Session      string        `json:"session"`       // Importer.SessionID, the exporter's Session.ID
	Mode         string        `json:"mode"`          // the exporter's mode for this session
	Regions      int64         `json:"regions"`       // regions granted and not revoked
	BytesRead    int64         `json:"bytes_read"`    // bytes moved from the exporter's memory
	BytesWritten int64         `json:"bytes_written"` // bytes moved into the exporter's memory
	Reads        int64         `json:"reads"`         // ReadAt, CopyTo and SendAM calls
	Writes       int64         `json:"writes"`        // WriteAt, CopyFrom and ReceiveAM calls
	Atomics      int64         `json:"atomics"`       // atomic operations performed (Add32, FetchAdd64, ...)
	Revocations  int64         `json:"revocations"`
	Rotations    int64         `json:"rotations"`
	LeaseAge     time.Duration `json:"lease_age_ns"` // age of the oldest grant in use
	Errors       int64         `json:"errors"`       // operations that failed
}

type exporterCounters struct {
	regions, served, ended, refused, throttled, grants, revocations, expired, rotations, acks, forced, forcedUnmaps, errors, eventsDropped atomic.Int64
}

type sessionCounters struct {
	grants, revocations, acks, errors atomic.Int64
}

type importerCounters struct {
	bytesRead, bytesWritten, reads, writes, atomics, revocations, rotations, errors atomic.Int64
}

// Stats returns the exporter's counters and one entry per open session.
func (e *Exporter) Stats() ExporterStats {
	c := &e.st
	st := ExporterStats{Mode: e.mode.String(), Regions: c.regions.Load(), Served: c.served.Load(), Ended: c.ended.Load(),
		Refused: c.refused.Load(), Throttled: c.throttled.Load(), Grants: c.grants.Load(), Revocations: c.revocations.Load(),
		Expired: c.expired.Load(), Rotations: c.rotations.Load(), Acks: c.acks.Load(),
		Forced: c.forced.Load(), ForcedUnmaps: c.forcedUnmaps.Load(), Errors: c.errors.Load(), EventsDropped: c.eventsDropped.Load()}
	for _, s := range e.Sessions() {
		st.Sessions = append(st.Sessions, s.Stats())
	}
	st.Importers = int64(len(st.Sessions))
	return st
}

// Stats returns the session's counters.
func (s *Session) Stats() SessionStats {
	st := SessionStats{ID: s.ID().String(), Remote: s.conn.RemoteAddr().String(), Grants: s.st.grants.Load(),
		Revocations: s.st.revocations.Load(), Acks: s.st.acks.Load(), Errors: s.st.errors.Load()}
	s.mu.Lock()
	st.UCX = s.peerUCX.String()
	var oldest time.Time
	for _, gs := range s.gens {
		for _, g := range gs {
			st.Live++
			if oldest.IsZero() || g.issued.Before(oldest) {
				oldest = g.issued
			}
		}
	}
	s.mu.Unlock()
	if !oldest.IsZero() {
		st.LeaseAge = time.Since(oldest)
	}
	return st
}

// publish makes f the key name of the map counters.MapName, owned by
// owner; a name held by another is refused.
func publish(name string, owner any, f func() any) error {
	if err := counters.Publish(name, owner, f); err != nil {
		return &ucs.Error{Op: "share: publish counters", Err: ucs.ErrAlreadyExists, Reason: err.Error()}
	}
	return nil
}

// unpublish removes the key name if owner holds it.
func unpublish(name string, owner any) { counters.Unpublish(name, owner) }
