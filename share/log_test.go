package share_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
)

// logSink is a JSON slog handler's output, safe for the exporter's and
// the importer's goroutines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (s *logSink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// lines are the records logged so far, decoded.
func (s *logSink) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.text()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "a line that is not JSON: %s", sc.Text())
		out = append(out, m)
	}
	return out
}

// with are the lines whose message is msg.
func with(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// TestNewcomerLogs: both sides given a logger log the session's story,
// each line with the one session id both sides share, and nothing secret.
func TestNewcomerLogs(t *testing.T) {
	var exl, iml logSink
	mem := memory(t, pattern(4096, 3))
	e, addr := serve(t, share.WithLogger(exl.logger()))
	require.NoError(t, e.Add(context.Background(), "a", mem, share.ReadOnly))
	imp := dial(t, addr, share.WithLogger(iml.logger()))
	id := imp.SessionID().String()
	r, err := imp.Region("a")
	require.NoError(t, err)
	p := make([]byte, 16)
	_, err = r.ReadAt(p, 0)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = e.Remove(ctx, "a")
	require.NoError(t, err)
	ss := e.Sessions()
	require.Len(t, ss, 1)
	require.NoError(t, imp.Close())
	select {
	case <-ss[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
	}

	require.Eventually(t, func() bool { // the data paths' ends are logged as they are reaped
		return len(with(exl.lines(t), "share: data path ended")) == 1 && len(with(iml.lines(t), "share: data path ended")) == 1
	}, 10*time.Second, 10*time.Millisecond, "exporter:\n%s\nimporter:\n%s", exl.text(), iml.text())
	for side, sink := range map[string]*logSink{"exporter": &exl, "importer": &iml} {
		lines := sink.lines(t)
		for _, msg := range []string{"share: session opened", "share: grant", "share: revoke", "share: acknowledged",
			"share: session ended", "share: data path started", "share: data path ended"} {
			got := with(lines, msg)
			if assert.Len(t, got, 1, "%s: %q lines in\n%s", side, msg, sink.text()) {
				assert.Equal(t, id, got[0]["session"], "%s: %q carries the session id both sides share", side, msg)
			}
		}
		grant := with(lines, "share: grant")
		if len(grant) == 1 {
			assert.Equal(t, "a", grant[0]["region"])
			assert.Equal(t, "read-only", grant[0]["access"])
		}
		text := sink.text()
		for _, enc := range []string{string(secret), hex.EncodeToString(secret), base64.StdEncoding.EncodeToString(secret)} {
			assert.NotContains(t, text, enc, "%s: the secret in a log line", side)
		}
	}
	assert.NotEmpty(t, with(exl.lines(t), "share: session opened")[0]["remote"], "the exporter's lines say where the importer is")
}

// TestLogFloodLimited: a flood of connections that never prove the secret
// makes at most LogRefusalsPerSecond lines a second, and the next line
// says how many were suppressed.
func TestLogFloodLimited(t *testing.T) {
	var exl logSink
	events := make(chan share.Event, 1024)
	e, addr := serve(t, share.WithLogger(exl.logger()), share.WithEvents(events))
	_ = e
	const flood = 100
	for range flood {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		c.Write([]byte("not a hello, not a frame of any kind: garbage"))
		c.Close()
	}
	for range flood { // every connection is refused (the events say so)
		ev := next(t, events)
		require.Equal(t, share.EventRefused, ev.Kind)
	}
	refused := with(exl.lines(t), "share: connection refused")
	t.Logf("%d refusals: %d lines", flood, len(refused))
	require.NotEmpty(t, refused)
	// The limit, read from the lines' own times: no second holds more
	// than LogRefusalsPerSecond of them.
	for i, a := range refused {
		ta, err := time.Parse(time.RFC3339Nano, a["time"].(string))
		require.NoError(t, err)
		in := 0
		for _, b := range refused[i:] {
			tb, err := time.Parse(time.RFC3339Nano, b["time"].(string))
			require.NoError(t, err)
			if tb.Sub(ta) < time.Second {
				in++
			}
		}
		assert.LessOrEqual(t, in, share.LogRefusalsPerSecond, "lines in the second from line %d", i)
	}
	for _, l := range refused {
		assert.Equal(t, "WARN", l["level"])
		assert.NotEmpty(t, l["remote"])
		assert.NotEmpty(t, l["err"])
	}
	if len(refused) < flood { // some were suppressed: the next line after the window says how many
		time.Sleep(time.Second)
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		c.Write([]byte("garbage"))
		c.Close()
		require.Equal(t, share.EventRefused, next(t, events).Kind)
		refused = with(exl.lines(t), "share: connection refused")
		last := refused[len(refused)-1]
		suppressed, _ := last["suppressed"].(float64)
		assert.Equal(t, float64(flood-len(refused)+1), suppressed, "the line after the suppressed ones counts them")
	}
}
