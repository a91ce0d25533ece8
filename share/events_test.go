package share_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
)

// next takes the next event, failing the test after 10 s.
func next(t *testing.T, events <-chan share.Event) share.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event came")
		return share.Event{}
	}
}

// TestNewcomerEvents: a program that selects on its exporter's events sees
// each session open, its acknowledgements and its end, with the session id
// the importer holds, and a party without the secret refused with why.
func TestNewcomerEvents(t *testing.T) {
	a, b := memory(t, pattern(4096, 1)), memory(t, pattern(4096, 2)) // closed after the exporter
	events := make(chan share.Event, 16)
	e, addr := serve(t, share.WithEvents(events))
	require.NoError(t, e.Add(context.Background(), "a", a, share.ReadOnly))
	require.NoError(t, e.Add(context.Background(), "b", b, share.ReadOnly))

	imp := dial(t, addr)
	ev := next(t, events)
	assert.Equal(t, share.EventOpened, ev.Kind)
	assert.Equal(t, imp.SessionID(), ev.Session, "the same id on both sides")
	assert.NotEmpty(t, ev.Remote)
	assert.NoError(t, ev.Err)
	assert.False(t, ev.Time.IsZero())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := e.Remove(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []share.SessionID{imp.SessionID()}, rev.Acknowledged)
	ev = next(t, events)
	assert.Equal(t, share.EventAcknowledged, ev.Kind)
	assert.Equal(t, "a", ev.Region)
	assert.Equal(t, imp.SessionID(), ev.Session)

	require.NoError(t, imp.Close()) // drops "b" first: its acknowledgement, then the end
	ev = next(t, events)
	assert.Equal(t, share.EventAcknowledged, ev.Kind)
	assert.Equal(t, "b", ev.Region)
	ev = next(t, events)
	assert.Equal(t, share.EventEnded, ev.Kind)
	assert.Equal(t, imp.SessionID(), ev.Session)
	assert.NoError(t, ev.Err, "the importer closed cleanly")
	assert.Contains(t, ev.String(), "ended session "+imp.SessionID().String())

	wrong, err := share.NewHMACSealer([]byte("a secret the exporter never saw"))
	require.NoError(t, err)
	_, err = share.Dial(ctx, "tcp", addr, wrong)
	require.ErrorIs(t, err, share.ErrSeal)
	ev = next(t, events)
	assert.Equal(t, share.EventRefused, ev.Kind)
	assert.ErrorIs(t, ev.Err, share.ErrSeal)
	assert.NotEmpty(t, ev.Remote)
	select {
	case ev := <-events:
		t.Fatalf("a refused connection's one event is EventRefused; then came %v", ev)
	case <-time.After(100 * time.Millisecond):
	}
	assert.Zero(t, e.Stats().EventsDropped)
}

// TestEventsExpiredAndDropped: a lease's expiry is an event; a channel
// with no room drops events, counted, and never blocks the exporter.
func TestEventsExpiredAndDropped(t *testing.T) {
	m, m2 := memory(t, pattern(4096, 1)), memory(t, pattern(4096, 1))
	events := make(chan share.Event, 8)
	e, addr := serve(t, share.WithEvents(events), share.WithLease(300*time.Millisecond))
	require.NoError(t, e.Add(context.Background(), "a", m, share.ReadOnly))
	imp := dial(t, addr)
	assert.Equal(t, share.EventOpened, next(t, events).Kind)
	ev := next(t, events)
	assert.Equal(t, share.EventExpired, ev.Kind)
	assert.Equal(t, "a", ev.Region)
	assert.Equal(t, imp.SessionID(), ev.Session)
	assert.Equal(t, share.EventAcknowledged, next(t, events).Kind, "the importer drops what expired")

	full := make(chan share.Event) // no room at all
	e2, addr2 := serve(t, share.WithEvents(full))
	require.NoError(t, e2.Add(context.Background(), "a", m2, share.ReadOnly))
	imp2 := dial(t, addr2)
	b := make([]byte, 8)
	r, err := imp2.Region("a")
	require.NoError(t, err)
	_, err = r.ReadAt(b, 0)
	require.NoError(t, err, "the exporter is not blocked by its events")
	require.NoError(t, imp2.Close())
	assert.Eventually(t, func() bool { return e2.Stats().EventsDropped >= 2 }, 10*time.Second, 10*time.Millisecond)
}
