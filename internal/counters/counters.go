// Package counters publishes the counters of ucx-go's objects through
// package expvar: one map, "ucx", whose keys are "<kind>.<name>" for the
// objects a program named (an exporter, an importer, a worker), each held
// by its object until that one's Close, and "handles", the number of UCX
// objects the process holds (ucs.LiveHandles).
package counters

import (
	"expvar"
	"fmt"
	"sync"

	"github.com/ucxgo/ucx/internal/handle"
)

// MapName is the expvar map every counter is published in.
const MapName = "ucx"

var (
	once  sync.Once
	m     *expvar.Map
	mu    sync.Mutex
	owner = map[string]any{}
)

func theMap() *expvar.Map {
	once.Do(func() {
		m = expvar.NewMap(MapName)
		m.Set("handles", expvar.Func(func() any { return handle.Live() }))
	})
	return m
}

// ErrTaken says a key is another object's.
type ErrTaken struct{ Key string }

func (e *ErrTaken) Error() string {
	return fmt.Sprintf("the expvar key %s of the map %s is another's until its Close", e.Key, MapName)
}

// Publish makes f the value of key, held by o; a key another holds is
// refused with *ErrTaken.
func Publish(key string, o any, f func() any) error {
	mp := theMap()
	mu.Lock()
	defer mu.Unlock()
	if _, taken := owner[key]; taken {
		return &ErrTaken{key}
	}
	owner[key] = o
	mp.Set(key, expvar.Func(f))
	return nil
}

// Unpublish removes key if o holds it.
func Unpublish(key string, o any) {
	mu.Lock()
	defer mu.Unlock()
	if owner[key] == o {
		delete(owner, key)
		theMap().Delete(key)
	}
}
