// Package zerohandle checks that a package's handles are safe as zero
// values, for its tests.
package zerohandle

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/ucxgo/ucx/ucs"
)

// noErrorOnZero are the methods whose nil error on a zero value is right:
// closing what is not open, no peer failure, and the copy of a hand-made
// eager message's Data (see AMMessage).
var noErrorOnZero = map[string]bool{"Close": true, "Err": true, "ReceiveInto": true}

// CallEveryMethod calls each exported method of v with zero arguments (a
// live context for a context.Context) and reports the calls that panicked
// or did not return within a few seconds, and
// the errors that are not ucs.ErrClosed, ErrInvalidParam or ErrInvalidAddr
// (or ErrUnsupported from a HaveX check)
// or do not start with opPrefix.
func CallEveryMethod(t *testing.T, v any, opPrefix string) {
	t.Helper()
	rv := reflect.ValueOf(v)
	ctxType := reflect.TypeFor[context.Context]()
	errType := reflect.TypeFor[error]()
	bytesType := reflect.TypeFor[[]byte]()
	for i := 0; i < rv.NumMethod(); i++ {
		m, mt := rv.Method(i), rv.Type().Method(i)
		name := fmt.Sprintf("(%s).%s", rv.Type(), mt.Name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		in := make([]reflect.Value, 0, m.Type().NumIn())
		for j := 0; j < m.Type().NumIn(); j++ {
			at := m.Type().In(j)
			if m.Type().IsVariadic() && j == m.Type().NumIn()-1 {
				break
			}
			if at == ctxType {
				in = append(in, reflect.ValueOf(ctx))
			} else if at == bytesType {
				in = append(in, reflect.ValueOf(make([]byte, 64))) // past the empty-input checks
			} else {
				in = append(in, reflect.Zero(at))
			}
		}
		done := make(chan any, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					done <- fmt.Sprintf("%v\n%s", p, debug.Stack())
				}
				done <- nil
			}()
			out := m.Call(in)
			if n := len(out); n > 0 && out[n-1].Type() == errType && !noErrorOnZero[mt.Name] {
				if err, _ := out[n-1].Interface().(error); err == nil {
					t.Errorf("%s returned no error", name)
				} else if !errors.Is(err, ucs.ErrClosed) && !errors.Is(err, ucs.ErrInvalidParam) && !errors.Is(err, ucs.ErrInvalidAddr) && !(strings.HasPrefix(mt.Name, "Have") && errors.Is(err, ucs.ErrUnsupported)) {
					t.Errorf("%s: %v, want ErrClosed, ErrInvalidParam or ErrInvalidAddr", name, err)
				} else if !strings.HasPrefix(err.Error(), opPrefix) {
					t.Errorf("%s: %q does not name the operation", name, err)
				}
			}
		}()
		select {
		case p := <-done:
			if p != nil {
				t.Errorf("%s panicked: %v", name, p)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s did not return", name)
		}
		cancel()
	}
}
