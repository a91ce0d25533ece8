#!/usr/bin/env bash
# ci/check-version-guard.sh: prove that building against an unsupported UCX
# (the host's own Debian 12 UCX 1.13 development files) fails with the one
# line of include/ucxgo/unsupported.h, not with pages of cgo errors, and that
# a build against a supported release refuses the same 1.13 libraries at run
# time with an error naming both releases.
# The packages are unpacked into a scratch folder; nothing is installed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)

dir="${UCX_ROOTFS_CACHE:-/var/cache/ucx-go}/host-ucx-dev"
if [ ! -f "$dir/.unpacked" ]; then
	rm -rf "$dir"; mkdir -p "$dir/deb"
	(cd "$dir/deb" && { apt-get download libucx-dev libucx0 >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get download libucx-dev libucx0 >/dev/null; }; })
	for d in "$dir"/deb/*.deb; do dpkg-deb -x "$d" "$dir/root"; done
	touch "$dir/.unpacked"
fi
version=$(sed -n 's/^Version: *//p' "$dir"/root/usr/lib/*/pkgconfig/ucx.pc)
case "$version" in
1.1[6-9].*|1.2[0-3].*) die "the host's libucx-dev is $version, a supported release: this check needs an unsupported one (Debian 12 ships 1.13)";;
esac

# pkg-config files pointing into the unpacked tree.
pc="$dir/pc"; mkdir -p "$pc"
libdir=$(dirname "$(ls "$dir"/root/usr/lib/*/libucp.so.0 | head -n1)")
for name in ucx ucx-uct; do
	printf 'Name: %s\nDescription: unpacked host UCX\nVersion: %s\nCflags: -I%s\nLibs: -L%s -lucp -luct -lucs\n' \
		"$name" "$version" "$dir/root/usr/include" "$libdir" >"$pc/$name.pc"
done

out=$(cd "$root" && PKG_CONFIG_PATH="$pc" PKG_CONFIG_LIBDIR="$pc" CGO_CFLAGS="-O2 -g -DUCXGO_GUARD_CHECK_$RANDOM" go build ./uct 2>&1) && die "build against UCX $version succeeded; the version guard did not fire"
want="ucx-go: found UCX $(echo "$version" | cut -d. -f1,2), which has no exported-mkey API; supported: UCX 1.16 to 1.23"
if ! grep -qF "$want" <<<"$out"; then
	echo "$out" >&2
	die "the build failed without the version guard's message"
fi
errors=$(grep -c 'error:' <<<"$out" || true)
echo "$out"
[ "$errors" -eq 1 ] || die "expected one error line, got $errors"
echo "ci: version guard OK: UCX $version is refused at build time with one line"

# Run time: a program built against trixie's 1.18.1, loaded with the same
# 1.13 libraries (copied under bin/, which the root filesystem sees), must
# refuse with an error naming both releases; UCX itself would only warn.
rm -rf "$root/bin/ucx-$version"; mkdir -p "$root/bin/ucx-$version"
cp -a "$libdir"/lib*.so* "$root/bin/ucx-$version/"
[ -d "$libdir/ucx" ] && cp -a "$libdir/ucx" "$root/bin/ucx-$version/"
"$root/ci/in-rootfs.sh" trixie go build -o bin/doctor-guard ./examples/doctor
set +e
out=$("$root/ci/in-rootfs.sh" trixie env LD_LIBRARY_PATH="$root/bin/ucx-$version" ./bin/doctor-guard 2>&1)
rc=$?
set -e
echo "$out" | grep -v '^ci:'
[ "$rc" -ne 0 ] || die "a 1.18.1 build ran on UCX $version without an error"
grep -qF "the loaded libucx is UCX $version, older than 1.16, the oldest release ucx-go runs on (it was built against 1.18.1)" <<<"$out" ||
	die "the run-time refusal does not name both releases"
echo "ci: run-time version guard OK: a 1.18.1 build refuses UCX $version"
