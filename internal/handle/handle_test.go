package handle

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChildKeepsParentAlive(t *testing.T) {
	var order []string
	parent := New[string](nil, func(s *string) { order = append(order, *s) }, "parent")
	child := New[string](parent, func(s *string) { order = append(order, *s) }, "child")
	require.True(t, parent.Close())
	assert.False(t, parent.Close(), "second Close is a no-op")
	assert.False(t, parent.Enter(), "closed parent refuses new work")
	assert.Empty(t, order, "parent released while a child lives")
	require.True(t, child.Enter(), "child still usable")
	child.Exit()
	require.True(t, child.Close())
	assert.Equal(t, []string{"child", "parent"}, order)
}

func TestCloseWaitsForCallsInFlight(t *testing.T) {
	var released atomic.Bool
	r := New[struct{}](nil, func(*struct{}) { released.Store(true) }, struct{}{})
	require.True(t, r.Enter())
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	assert.False(t, released.Load())
	r.Exit()
	<-closed
	assert.True(t, released.Load())
}

func TestConcurrentUseAndClose(t *testing.T) {
	var releases atomic.Int32
	r := New[struct{}](nil, func(*struct{}) { releases.Add(1) }, struct{}{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if !r.Enter() {
					return
				}
				r.Exit()
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); r.Close() }()
	}
	wg.Wait()
	assert.Equal(t, int32(1), releases.Load())
}

type owner struct{ _ [16]byte }

func TestCleanupReleasesLeak(t *testing.T) {
	base, leaks := Live(), Leaked()
	var released atomic.Bool
	func() {
		o := &owner{}
		Track(o, New[struct{}](nil, func(*struct{}) { released.Store(true) }, struct{}{}))
	}()
	for i := 0; i < 200 && !released.Load(); i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	assert.True(t, released.Load())
	assert.Equal(t, base, Live())
	assert.Equal(t, leaks+1, Leaked())
}

// embedded is a handle whose Resource is part of it (the hot-path form).
type embedded struct {
	res Resource[*atomic.Bool]
	_   [16]byte
}

func (e *embedded) collect() { e.res.Collect() }

func TestFinalizerReleasesEmbeddedLeak(t *testing.T) {
	base, leaks := Live(), Leaked()
	var parentReleased, released atomic.Bool
	parent := New(nil, func(b **atomic.Bool) { (*b).Store(true) }, &parentReleased)
	func() {
		e := &embedded{}
		e.res.State = &released
		e.res.Init(parent, func(b **atomic.Bool) { (*b).Store(true) })
		Finalize(e, (*embedded).collect)
	}()
	require.True(t, parent.Close())
	for i := 0; i < 200 && !parentReleased.Load(); i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	assert.True(t, released.Load(), "the dropped handle's C object was released")
	assert.True(t, parentReleased.Load(), "then its parent's")
	assert.Equal(t, base, Live())
	assert.Equal(t, leaks+1, Leaked())
}

func TestClosedEmbeddedIsNotALeak(t *testing.T) {
	leaks := Leaked()
	e := &embedded{}
	var released atomic.Bool
	e.res.State = &released
	e.res.Init(nil, func(b **atomic.Bool) { (*b).Store(true) })
	Finalize(e, (*embedded).collect)
	require.True(t, e.res.Close())
	Unfinalize(e)
	assert.True(t, released.Load())
	assert.Equal(t, leaks, Leaked())
}
