package ucs

import (
	"fmt"
	"sync"

	"github.com/ucxgo/ucx/cgo"
)

// Version is a UCX release number.
type Version = cgo.Version

// BuiltVersion is the UCX release ucx-go was compiled against.
func BuiltVersion() Version { return cgo.BuiltVersion() }

// LoadedVersion is the release of the libucx loaded at run time.
func LoadedVersion() Version { return cgo.LoadedVersion() }

// FormatVersion renders v as "major.minor.patch".
func FormatVersion(v Version) string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// checkVersions compares the build and run-time releases. The soname is
// libucp.so.0 for every release and UCX itself only warns, while the UCT v2
// layouts differ between minors: a different major.minor is refused.
func checkVersions(built, loaded Version) error {
	if built.Major == loaded.Major && built.Minor == loaded.Minor {
		return nil
	}
	return &Error{
		Op:  "ucx: version check",
		Err: ErrVersionMismatch,
		Reason: fmt.Sprintf("ucx-go was built against UCX %s but the loaded libucx is %s; rebuild against the loaded release (major.minor must match)",
			FormatVersion(built), FormatVersion(loaded)),
	}
}

var versionErr = sync.OnceValue(func() error { return checkVersions(BuiltVersion(), LoadedVersion()) })

// CheckVersion returns nil when the loaded libucx is the release ucx-go was
// built for, else an error naming both. Every constructor calls it.
func CheckVersion() error { return versionErr() }
