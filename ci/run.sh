#!/usr/bin/env bash
# ci/run.sh TARGET: run `make TARGET` where a supported UCX is: natively when
# pkg-config finds one (and no UCX_SUITE is asked for), else inside the
# cached Debian root filesystem of UCX_SUITE (default trixie, UCX 1.18.1).
# UCX_RELEASE=VERSION runs it in the trixie root filesystem against that
# upstream build (ci/release.sh), found through pkg-config.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=$1

supported="1.16 1.17 1.18 1.19 1.20 1.21 1.22 1.23"
if [ -n "${UCXGO_ROOTFS:-}" ]; then
	exec make --no-print-directory "$target"
fi
if [ -n "${UCX_RELEASE:-}" ]; then
	exec "$here/in-rootfs.sh" trixie make --no-print-directory "$target"
fi
if [ -z "${UCX_SUITE:-}" ]; then
	found=$(pkg-config --modversion ucx 2>/dev/null || true)
	if [ -n "$found" ] && [[ " $supported " == *" $(echo "$found" | cut -d. -f1,2) "* ]]; then
		echo "ci: using the host's UCX $found" >&2
		exec make --no-print-directory "$target"
	fi
	echo "ci: the host has ${found:+UCX $found, }no supported UCX ($supported); using the trixie root filesystem" >&2
fi
suite=${UCX_SUITE:-trixie}
exec "$here/in-rootfs.sh" "$suite" make --no-print-directory "$target"
