package share

import (
	"fmt"

	"github.com/ucxgo/ucx/ucs"
)

// compatible says whether an exporter on UCX exp and an importer on UCX
// imp can hold a session, before either side's UCX sees the other: UCX
// 1.20 and 1.22 do not wire up with another minor release over tcp, and
// UCX aborts the listening side during that wire-up (measured for 1.16.0
// to 1.22.0, docs/behaviour.md), so such a pair is refused by this
// protocol instead. The reason names both releases.
func compatible(exp, imp ucs.Version) error {
	refuse := func(why string) error {
		return &ucs.Error{Op: "share: session", Err: ErrRefused,
			Reason: fmt.Sprintf("exporter on UCX %s, importer on UCX %s: %s", exp, imp, why)}
	}
	old := ucs.OldestRelease
	for _, v := range []ucs.Version{exp, imp} {
		if v.Major != old.Major || v.Minor < old.Minor {
			return refuse(fmt.Sprintf("UCX %s is older than %s, the oldest release this package supports", v, old))
		}
	}
	switch {
	case exp.Minor == imp.Minor:
		return nil
	case exp.Minor == 20 || imp.Minor == 20:
		return refuse("UCX 1.20 does not wire up with another minor release (its tcp loopback lane is checked wrongly; fixed in 1.21), and UCX aborts the listening side when it tries")
	case (exp.Minor >= 22) != (imp.Minor >= 22):
		return refuse("UCX 1.22 changed the tcp address format, so 1.22 and later do not wire up with 1.21 and earlier, and UCX aborts the listening side when they try")
	}
	return nil
}
