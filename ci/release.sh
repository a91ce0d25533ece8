#!/usr/bin/env bash
# ci/release.sh VERSION: unpack (once) the upstream UCX build of VERSION from
# the fixtures folder (UCX_RELEASES_DIR, default ../shared/ucx-releases beside
# the repository) into the cache, and print the directory that holds
# opt/ucx/VERSION. The builds link against trixie's libc: they run inside the
# trixie root filesystem (ci/in-rootfs.sh mounts them at /opt/ucx/VERSION).
# ci/release.sh --list prints the versions the fixtures folder holds.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
src=${UCX_RELEASES_DIR:-$root/../shared/ucx-releases}

if [ "${1:-}" = --list ]; then
	for f in "$src"/ucx-*.tar.xz; do
		[ -f "$f" ] || continue
		f=${f##*/ucx-}; echo "${f%.tar.xz}"
	done | sort -V
	exit 0
fi
v=${1:?usage: ci/release.sh VERSION | --list}
tarball="$src/ucx-$v.tar.xz"
[ -f "$tarball" ] || die "no UCX $v build in $src (have: $(ls "$src" 2>/dev/null | sed -n 's/^ucx-\(.*\)\.tar\.xz$/\1/p' | tr '\n' ' '))"
# The cache is keyed on the tarball's content: release-VERSION-SHA (the
# first 16 hex digits of its SHA-256). A directory, once complete, is never
# changed nor removed by this script: another run (another checkout, whose
# fixture copy has another modification time, or the same bytes) may have it
# mounted under running tests. A new tarball gets a directory of its own;
# old ones stay until someone removes them by hand with nothing running.
sum=$(sha256sum "$tarball" | cut -c1-64)
if [ -f "$src/SHA256SUMS" ]; then
	want=$(sed -n "s/^\([0-9a-f]\{64\}\)  *\*\{0,1\}ucx-$v\.tar\.xz\$/\1/p" "$src/SHA256SUMS")
	[ -z "$want" ] || [ "$want" = "$sum" ] || die "$tarball does not match $src/SHA256SUMS"
fi
cache=${UCX_ROOTFS_CACHE:-/var/cache/ucx-go}
dir="$cache/release-$v-${sum:0:16}"
if [ -f "$dir/.ucx-go-complete" ]; then
	echo "$dir"; exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.release-$v.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xJf "$tarball" -C "$tmp"
[ -f "$tmp/opt/ucx/$v/lib/pkgconfig/ucx.pc" ] || die "$tarball holds no opt/ucx/$v/lib/pkgconfig/ucx.pc"
echo "$sum" >"$tmp/.ucx-go-complete"
chmod 755 "$tmp"
# Two runs may unpack the same tarball at once: the first rename wins, the
# other finds the directory in place and drops its own copy (rename(2) of a
# directory onto a non-empty one fails; mv -T does not merge).
if mv -T "$tmp" "$dir" 2>/dev/null; then
	trap - EXIT
	echo "ci: UCX $v unpacked into $dir" >&2
fi
[ -f "$dir/.ucx-go-complete" ] || die "cannot unpack UCX $v into $dir"
echo "$dir"
