package share_test

// Review of the atomics, Exporter.Add's ctx, WithLogger and the shared
// Option type, written as a newcomer writes the first programs: from the
// godoc alone, in the order that comes to mind.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"expvar"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/share"
)

func reviewCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// word64 is the host's view of the 64-bit word at off of m.
func word64(m *share.Memory, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m.Bytes()[off])) }

// Atomics right after Dial on a region whose length is not a multiple of
// 8: the last whole word of each size is reachable, the 64-bit word that
// crosses the end is ErrOutOfRange, and the host sees each result.
func TestReviewAtomicsLastWord(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	mem := memory(t, make([]byte, 12))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("w")
	require.NoError(t, err)
	_, err = r.FetchAdd64(ctx, 8, 1)
	require.ErrorIs(t, err, share.ErrOutOfRange, "a 64-bit word crossing the end")
	require.NoError(t, r.Add32(ctx, 8, 0x01020304))
	old, err := r.Swap32(ctx, 8, 5)
	require.NoError(t, err)
	assert.Equal(t, uint32(0x01020304), old)
	assert.Equal(t, uint32(5), binary.LittleEndian.Uint32(mem.Bytes()[8:]))
	require.NoError(t, r.Add64(ctx, 0, ^uint64(0)), "adding -1 wraps")
	assert.Equal(t, ^uint64(0), binary.LittleEndian.Uint64(mem.Bytes()))
}

// An atomic whose ctx ended before the call: the error wraps the
// documented sentinel and ctx.Err(), and nothing is done (Go's
// convention, and the one ReadAtContext and WriteAtContext keep: "it
// starts no more"; TestReviewWriteAtCtxAlreadyEnded). Now the request is
// sent all the same and performed every time (20 of 20) while the call
// returns ErrCanceled or ErrTimedOut: a program that retries a failed
// FetchAdd adds twice. The godoc says nothing of it; the comment in
// atomic.go that go doc does not show says "may yet be performed" of a
// ctx that "ends first", not of one that had ended.
func TestReviewAtomicsCtxAlreadyEnded(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	mem := memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("w")
	require.NoError(t, err)

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for i := range 20 {
		err := r.Add64(canceled, 0, 1)
		require.ErrorIs(t, err, share.ErrCanceled, "call %d", i)
		require.ErrorIs(t, err, context.Canceled, "call %d", i)
		_, err = r.FetchAdd64(expired, 8, 1)
		require.ErrorIs(t, err, share.ErrTimedOut, "call %d", i)
		require.ErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
	}
	// The region still serves, and the revocation does not wait long.
	v, err := r.FetchAdd64(ctx, 16, 1)
	require.NoError(t, err)
	assert.Zero(t, v)
	time.Sleep(200 * time.Millisecond) // any request that went out has landed by now
	assert.Zero(t, atomic.LoadUint64(word64(mem, 0)), "an Add64 whose ctx was canceled before the call was performed")
	assert.Zero(t, atomic.LoadUint64(word64(mem, 8)), "a FetchAdd64 whose deadline had passed before the call was performed")
}

// atomicStream runs n goroutines of FetchAdd64(off, 1) until stop, and
// returns how many succeeded and the errors of the others.
func atomicStream(r *share.Region, off, n int, stop <-chan struct{}) func() (int64, []error) {
	var ok atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := r.FetchAdd64(ctx, off, 1)
				cancel()
				if err == nil {
					ok.Add(1)
					continue
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				time.Sleep(time.Millisecond) // a failed region fails fast: don't spin
			}
		}()
	}
	return func() (int64, []error) {
		wg.Wait()
		return ok.Load(), errs
	}
}

// Rotate under a stream of atomics: no call fails ("a rotation switches
// it to the new grant without failing a call"), and every add landed once.
func TestReviewAtomicsDuringRotate(t *testing.T) {
	ctx := reviewCtx(t, 20*time.Second)
	mem := memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("w")
	require.NoError(t, err)
	stop := make(chan struct{})
	wait := atomicStream(r, 0, 3, stop)
	for range 3 {
		time.Sleep(50 * time.Millisecond)
		_, err := e.Rotate(ctx, "w", 10*time.Millisecond)
		require.NoError(t, err)
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	n, errs := wait()
	assert.Empty(t, errs, "a call failed during a rotation")
	assert.Positive(t, n)
	assert.Equal(t, uint64(n), atomic.LoadUint64(word64(mem, 0)), "adds lost or doubled across rotations")
}

// Remove under a stream of atomics, with a generous ctx and with one that
// has ended already: every call succeeds or fails with ErrRevoked, the
// word counts exactly the calls that succeeded, and it never changes
// after Remove returned.
func TestReviewAtomicsDuringRemove(t *testing.T) {
	for _, c := range []struct {
		name  string
		ended bool
	}{{"ctx", false}, {"ended ctx", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := reviewCtx(t, 20*time.Second)
			mem, other := memory(t, make([]byte, 64)), memory(t, make([]byte, 64))
			e, addr := serve(t)
			require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
			require.NoError(t, e.Add(ctx, "other", other, share.ReadWrite))
			imp := dial(t, addr)
			r, err := imp.Region("w")
			require.NoError(t, err)
			stop := make(chan struct{})
			wait := atomicStream(r, 0, 3, stop)
			time.Sleep(100 * time.Millisecond)
			rctx := ctx
			if c.ended {
				var cancel context.CancelFunc
				rctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			_, err = e.Remove(rctx, "w")
			if c.ended {
				if err != nil { // Remove's godoc: ErrCanceled when ctx was canceled
					require.ErrorIs(t, err, share.ErrCanceled)
					require.ErrorIs(t, err, context.Canceled)
				}
			} else {
				require.NoError(t, err)
			}
			after := atomic.LoadUint64(word64(mem, 0))
			time.Sleep(100 * time.Millisecond)
			close(stop)
			n, errs := wait()
			assert.Equal(t, after, atomic.LoadUint64(word64(mem, 0)), "the word changed after Remove returned")
			assert.Equal(t, uint64(n), after, "the word does not count the calls that succeeded")
			for _, err := range errs {
				if !assert.ErrorIs(t, err, share.ErrRevoked) {
					break
				}
			}
			// The session goes on with its other region.
			o, err := imp.Region("other")
			require.NoError(t, err)
			require.NoError(t, o.Add64(ctx, 0, 1))
			assert.Equal(t, uint64(1), atomic.LoadUint64(word64(other, 0)))
		})
	}
}

// Exporter.Close and Importer.Close under a stream of atomics: nothing
// hangs, every failed call wraps ErrRevoked (the exporter's Close revokes)
// or ErrClosed (the importer's own Close), and the word counts the calls
// that succeeded.
func TestReviewAtomicsDuringClose(t *testing.T) {
	for _, side := range []string{"exporter", "importer"} {
		t.Run(side, func(t *testing.T) {
			mem := memory(t, make([]byte, 64))
			e, addr := serve(t)
			require.NoError(t, e.Add(context.Background(), "w", mem, share.ReadWrite))
			imp := dial(t, addr)
			r, err := imp.Region("w")
			require.NoError(t, err)
			stop := make(chan struct{})
			wait := atomicStream(r, 0, 3, stop)
			time.Sleep(100 * time.Millisecond)
			closed := make(chan error, 1)
			go func() {
				if side == "exporter" {
					closed <- e.Close()
				} else {
					closed <- imp.Close()
				}
			}()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(15 * time.Second):
				t.Fatal("Close hangs under atomics")
			}
			time.Sleep(100 * time.Millisecond)
			close(stop)
			n, errs := wait()
			assert.Equal(t, uint64(n), atomic.LoadUint64(word64(mem, 0)), "the word does not count the calls that succeeded")
			want := share.ErrRevoked
			if side == "importer" {
				want = share.ErrClosed
			}
			require.NotEmpty(t, errs)
			for _, err := range errs {
				if !assert.ErrorIs(t, err, want) {
					break
				}
			}
		})
	}
}

// Every atomic after the importer's Close fails with ErrClosed, at once.
func TestReviewAtomicsAfterImporterClose(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	mem := memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("w")
	require.NoError(t, err)
	require.NoError(t, imp.Close())
	calls := map[string]func() error{
		"Add32":  func() error { return r.Add32(ctx, 0, 1) },
		"Add64":  func() error { return r.Add64(ctx, 0, 1) },
		"FAdd32": func() error { _, err := r.FetchAdd32(ctx, 0, 1); return err },
		"FAdd64": func() error { _, err := r.FetchAdd64(ctx, 0, 1); return err },
		"Swap32": func() error { _, err := r.Swap32(ctx, 0, 1); return err },
		"Swap64": func() error { _, err := r.Swap64(ctx, 0, 1); return err },
		"CAS32":  func() error { _, err := r.CompareAndSwap32(ctx, 0, 0, 1); return err },
		"CAS64":  func() error { _, err := r.CompareAndSwap64(ctx, 0, 0, 1); return err },
	}
	for name, call := range calls {
		assert.ErrorIs(t, call(), share.ErrClosed, name)
	}
	assert.Equal(t, make([]byte, 64), mem.Bytes())
}

// WithLogger(nil) on both sides is "no lines", not a panic; one logger
// given to both sides (the same Option value) logs both sides' lines with
// the same session id.
func TestReviewLoggerNilAndShared(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	mem := memory(t, make([]byte, 64))
	var none share.Option = share.WithLogger(nil)
	e, addr := serve(t, none)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr, none)
	r, err := imp.Region("w")
	require.NoError(t, err)
	require.NoError(t, r.Add64(ctx, 0, 1))
	_, err = e.Rotate(ctx, "w", 0)
	require.NoError(t, err)
	require.NoError(t, imp.Close())

	var sink logSink
	both := share.WithLogger(sink.logger())
	mem2 := memory(t, make([]byte, 64))
	e2, addr2 := serve(t, both)
	require.NoError(t, e2.Add(ctx, "w", mem2, share.ReadWrite))
	imp2 := dial(t, addr2, both)
	r2, err := imp2.Region("w")
	require.NoError(t, err)
	require.NoError(t, r2.Add64(ctx, 0, 1))
	_, err = e2.Rotate(ctx, "w", 0)
	require.NoError(t, err)
	require.NoError(t, imp2.Close())
	id := imp2.SessionID().String()
	require.Eventually(t, func() bool {
		exporter, importer := 0, 0 // the exporter's lines carry "remote"
		for _, l := range sink.lines(t) {
			if l["session"] != id {
				continue
			}
			if _, ok := l["remote"]; ok {
				exporter++
			} else {
				importer++
			}
		}
		return exporter >= 3 && importer >= 3
	}, 5*time.Second, 10*time.Millisecond, "both sides' lines with the one session id:\n%s", sink.text())
}

// Exporter.Add with a ctx that has ended already (a newcomer passes the
// ctx of a request or of the service, which may be done), one
// well-behaved importer connected. Its grant takes half a millisecond; the
// godoc's ending of "a session whose grant is not sent when ctx ends" is
// for an importer that "does not read its connection": this one reads.
// Either Add refuses the ended ctx (ErrCanceled, nothing shared) or it
// shares the region; in neither case may it end the healthy session. Now
// it ends it (a 2 ms ctx does not).
func TestReviewAddEndedCtx(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	a, b := memory(t, make([]byte, 64)), memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "a", a, share.ReadWrite))
	imp := dial(t, addr)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.Add(ended, "b", b, share.ReadWrite)
	shared := err == nil
	if !shared {
		require.ErrorIs(t, err, share.ErrCanceled)
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, imp.Err(), "the importer's session was ended by an Add whose ctx had ended")
	ra, err := imp.Region("a")
	require.NoError(t, err)
	assert.NoError(t, ra.Add64(ctx, 0, 1), "the importer's other region")
	if shared {
		_, err := imp.Region("b")
		assert.NoError(t, err, "the region added is the importer's")
	}
}

// Rotate with a ctx that has ended already, one well-behaved importer:
// it must not end the session silently. The package doc promises that
// Rotate returns "with a Revocation naming the sessions that
// acknowledged, ended, or were forced"; now the session is ended (the new
// grant "not sent by then") and Rotate returns nil with an empty
// Revocation.
func TestReviewRotateEndedCtx(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	mem := memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	rev, err := e.Rotate(ended, "w", 0)
	time.Sleep(300 * time.Millisecond)
	if imp.Err() == nil {
		return // the session goes on: nothing to name
	}
	named := append(append(append([]share.SessionID(nil), rev.Acknowledged...), rev.Ended...), rev.Forced...)
	assert.Contains(t, named, imp.SessionID(), "Rotate ended the session (%v) and its Revocation does not name it: %+v, err %v", imp.Err(), rev, err)
	assert.Error(t, err, "Rotate ended a session at its ctx's end and returned nil")
}

// Rotate returns "with a Revocation naming the sessions that acknowledged,
// ended, or were forced" (package doc, "What a revocation guarantees"):
// a well-behaved importer that moves over within the grace acknowledged
// the old generation, so Rotate must name it.
func TestReviewRotateNamesTheAcknowledgingSession(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	mem := memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr)
	rev, err := e.Rotate(ctx, "w", time.Second)
	require.NoError(t, err)
	assert.Equal(t, []share.SessionID{imp.SessionID()}, rev.Acknowledged, "Rotate's Revocation: %+v", rev)
	assert.Empty(t, rev.Forced)
	assert.Empty(t, rev.Ended)
}

// The counters of atomics: each performed one counts in Atomics, and one
// refused for the grant's access counts in Errors ("operations that
// failed"), as a WriteAt through a read-only grant does; expvar publishes
// them under one Option value given to both sides.
func TestReviewAtomicsCounted(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	rw, ro := memory(t, make([]byte, 64)), memory(t, make([]byte, 64))
	name := share.WithExpvarName("review-atomics")
	e, addr := serve(t, name)
	require.NoError(t, e.Add(ctx, "rw", rw, share.ReadWrite))
	require.NoError(t, e.Add(ctx, "ro", ro, share.ReadOnly))
	imp := dial(t, addr, name)
	r, err := imp.Region("rw")
	require.NoError(t, err)
	rr, err := imp.Region("ro")
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, r.Add64(ctx, 0, 1))
	}
	_, err = rr.WriteAt([]byte{1}, 0)
	require.ErrorIs(t, err, share.ErrAccess)
	assert.Equal(t, int64(1), imp.Stats().Errors, "a refused WriteAt counts")
	require.ErrorIs(t, rr.Add64(ctx, 0, 1), share.ErrAccess)
	_, err = r.FetchAdd64(ctx, 3, 1)
	require.ErrorIs(t, err, share.ErrInvalid)
	_, err = r.FetchAdd64(ctx, 64, 1)
	require.ErrorIs(t, err, share.ErrOutOfRange)
	st := imp.Stats()
	assert.Equal(t, int64(3), st.Atomics)
	m, ok := expvar.Get("ucx").(*expvar.Map)
	require.True(t, ok)
	var pub share.ImporterStats
	require.NoError(t, json.Unmarshal([]byte(m.Get("importer.review-atomics").String()), &pub))
	assert.Equal(t, int64(3), pub.Atomics)
	require.NotNil(t, m.Get("exporter.review-atomics"))
	assert.Equal(t, int64(2), st.Errors, "an atomic refused for the grant's access is an operation that failed, as such a WriteAt is")
}

// Beside the atomics: WriteAtContext with a ctx that ended before the call
// writes nothing (it "starts no more"), the contrast the atomics' test
// above draws.
func TestReviewWriteAtCtxAlreadyEnded(t *testing.T) {
	ctx := reviewCtx(t, 10*time.Second)
	mem := memory(t, make([]byte, 64))
	e, addr := serve(t)
	require.NoError(t, e.Add(ctx, "w", mem, share.ReadWrite))
	imp := dial(t, addr)
	r, err := imp.Region("w")
	require.NoError(t, err)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	n, err := r.WriteAtContext(canceled, []byte{1, 2, 3}, 0)
	require.Error(t, err)
	assert.Zero(t, n)
	assert.ErrorIs(t, err, share.ErrCanceled)
	assert.ErrorIs(t, err, context.Canceled)
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, make([]byte, 64), mem.Bytes())
}

// The atomics' contract (a word aligned to its size, what access each
// needs, the errors of a word outside the region or misaligned, export
// mode's ErrUnsupported, what an ended ctx leaves done) is what a newcomer
// needs before the first call. It is written in share/atomic.go as a
// comment attached to no declaration, so go doc shows none of it: each
// atomic's godoc is one line ("Add64 adds v to the 64-bit word at off.").
// The docs of Region and of its atomics must carry it.
func TestReviewAtomicsContractInGodoc(t *testing.T) {
	fset := token.NewFileSet()
	var files []*ast.File
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/ucxgo/ucx/share")
	require.NoError(t, err)
	var text strings.Builder
	for _, typ := range pkg.Types {
		if typ.Name != "Region" {
			continue
		}
		text.WriteString(typ.Doc)
		for _, m := range typ.Methods {
			switch m.Name {
			case "Add32", "Add64", "FetchAdd32", "FetchAdd64", "Swap32", "Swap64", "CompareAndSwap32", "CompareAndSwap64":
				text.WriteString(m.Doc)
			}
		}
	}
	got := text.String()
	for _, want := range []string{"align", "ErrUnsupported", "ReadWrite", "may yet be performed"} {
		assert.True(t, strings.Contains(got, want), "the godoc of Region and its atomics says nothing of %q", want)
	}
}
