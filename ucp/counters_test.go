package ucp_test

import (
	"encoding/json"
	"expvar"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucp"
	"github.com/ucxgo/ucx/ucs"
)

// A worker named with WithExpvarName is published in the map "ucx" until
// its Close, beside "handles"; the name is one worker's at a time.
func TestWorkerCountersPublished(t *testing.T) {
	ctx := newContext(t)
	w, err := ctx.NewWorker(ucp.WithExpvarName("counters-test"))
	require.NoError(t, err)
	m, ok := expvar.Get("ucx").(*expvar.Map)
	require.True(t, ok, "the map ucx is published")
	v := m.Get("worker.counters-test")
	require.NotNil(t, v)
	var st ucp.Stats
	require.NoError(t, json.Unmarshal([]byte(v.String()), &st), "%s", v.String())
	assert.Equal(t, w.Stats(), st)
	var handles int64
	require.NoError(t, json.Unmarshal([]byte(m.Get("handles").String()), &handles))
	assert.Positive(t, handles, "the context and the worker are held")

	_, err = ctx.NewWorker(ucp.WithExpvarName("counters-test"))
	require.ErrorIs(t, err, ucs.ErrAlreadyExists)
	assert.NotNil(t, m.Get("worker.counters-test"), "the refused worker took nothing of the first's")

	require.NoError(t, w.Close())
	assert.Nil(t, m.Get("worker.counters-test"), "unpublished at Close")
	w2, err := ctx.NewWorker(ucp.WithExpvarName("counters-test"))
	require.NoError(t, err, "the name is free again")
	require.NoError(t, w2.Close())
}
