package ucs

import (
	"fmt"
	"sync"

	"github.com/ucxgo/ucx/cgo"
)

// Version is a UCX release number.
type Version struct{ Major, Minor, Patch uint }

// String renders v as "major.minor.patch".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// BuiltVersion is the UCX release whose headers ucx-go was compiled with.
func BuiltVersion() Version { return Version(cgo.BuiltVersion()) }

// LoadedVersion is the release of the libucx loaded at run time, which may
// be any supported release, not only the one built against.
func LoadedVersion() Version { return Version(cgo.LoadedVersion()) }

// The releases ucx-go runs on: OldestRelease up to NewestVerifiedRelease
// (newer ones only in a build with the ucxgo_unverified_ucx tag).
var (
	OldestRelease         = Version{Major: 1, Minor: cgo.OldestMinor}
	NewestVerifiedRelease = Version{Major: 1, Minor: cgo.NewestVerifiedMinor}
)

// ABILayout says which of the UCT v2 layouts ucx-go uses with the loaded
// release, named by the first release that has it: "1.16" (1.16-1.17),
// "1.18" (1.18-1.21) or "1.22" (1.22 and later).
func ABILayout() string { return fmt.Sprintf("1.%d", cgo.AttrLayoutSince()) }

// checkVersions decides whether a build against built may drive loaded. The
// soname is libucp.so.0 in every release and UCX itself only warns, so the
// binding picks each layout from the loaded release (any of the supported
// range works with any build) and refuses the rest, naming both releases.
func checkVersions(built, loaded Version, allowUnverified bool) error {
	reason := ""
	switch {
	case loaded.Major != 1:
		reason = fmt.Sprintf("the loaded libucx is UCX %s, not a 1.x release, which is all ucx-go knows (it was built against %s); install UCX %d.%d to %d.%d",
			loaded, built, OldestRelease.Major, OldestRelease.Minor, NewestVerifiedRelease.Major, NewestVerifiedRelease.Minor)
	case loaded.Minor < OldestRelease.Minor:
		reason = fmt.Sprintf("the loaded libucx is UCX %s, older than %d.%d, the oldest release ucx-go runs on (it was built against %s); install UCX %d.%d to %d.%d",
			loaded, OldestRelease.Major, OldestRelease.Minor, built, OldestRelease.Major, OldestRelease.Minor, NewestVerifiedRelease.Major, NewestVerifiedRelease.Minor)
	case loaded.Minor > NewestVerifiedRelease.Minor && !allowUnverified:
		reason = fmt.Sprintf("the loaded libucx is UCX %s, newer than %d.%d, the newest release verified (ucx-go was built against %s); rebuild with -tags ucxgo_unverified_ucx to run on it at your own risk, or load UCX %d.%d to %d.%d",
			loaded, NewestVerifiedRelease.Major, NewestVerifiedRelease.Minor, built, OldestRelease.Major, OldestRelease.Minor, NewestVerifiedRelease.Major, NewestVerifiedRelease.Minor)
	default:
		return nil
	}
	return &Error{Op: "ucx: version check", Err: ErrUnsupportedRelease, Reason: reason}
}

var versionErr = sync.OnceValue(func() error {
	return checkVersions(BuiltVersion(), LoadedVersion(), cgo.AllowUnverified)
})

// CheckVersion returns nil when ucx-go can drive the loaded libucx, else an
// error (ErrUnsupportedRelease) naming the loaded and the built release.
// Every constructor calls it.
func CheckVersion() error { return versionErr() }
