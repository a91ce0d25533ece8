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
dir="${UCX_ROOTFS_CACHE:-/var/cache/ucx-go}/release-$v"
stamp=$(stat -c '%s %Y' "$tarball")
if [ -f "$dir/.ucx-go-stamp" ] && [ "$(cat "$dir/.ucx-go-stamp")" = "$stamp" ]; then
	echo "$dir"; exit 0
fi
if [ -f "$src/SHA256SUMS" ]; then
	(cd "$src" && grep " ucx-$v.tar.xz\$" SHA256SUMS | sha256sum -c --quiet -) >&2 ||
		die "$tarball does not match $src/SHA256SUMS"
fi
tmp="$dir.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
tar -xJf "$tarball" -C "$tmp"
[ -f "$tmp/opt/ucx/$v/lib/pkgconfig/ucx.pc" ] || die "$tarball holds no opt/ucx/$v/lib/pkgconfig/ucx.pc"
echo "$stamp" >"$tmp/.ucx-go-stamp"
rm -rf "$dir"; mv "$tmp" "$dir"; trap - EXIT
echo "ci: UCX $v unpacked into $dir" >&2
echo "$dir"
