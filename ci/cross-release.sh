#!/usr/bin/env bash
# ci/cross-release.sh: one binary, any supported UCX, from builds against
# releases other than Debian trixie's (ci/matrix.sh runs the trixie build on
# every release). Test binaries of packages cgo, uct and ucp are built
# against the oldest upstream release (XREL_BUILDS; its declarations differ
# most from the newest) and run against the other releases' libraries, with
# nothing but LD_LIBRARY_PATH changed (the soname is libucp.so.0 in every
# release): cgo and uct against every release, ucp on the pairs of
# XREL_UCP_PAIRS (build:loaded; the default: oldest on newest). Then a
# program built against Debian trixie's 1.18.1 runs on Debian forky's
# 1.23.0. Runs as root (root filesystems: docs/development.md#provisioning).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

oldest=$(ci/release.sh --list | head -n1) newest=$(ci/release.sh --list | tail -n1)
builds=${XREL_BUILDS:-$oldest}
pairs=${XREL_UCP_PAIRS:-$oldest:$newest}
out=bin/xrel

if [ "${1:-}" = --inside ]; then
	# Inside the trixie root filesystem: every release is at /opt/ucx/V,
	# and /usr/lib holds Debian's 1.18.1 ("debian").
	shift
	fail=0
	run() { # run BUILD LOADED PKG
		local b=$1 l=$2 pkg=$3 lib="" rc=0 log
		if [ "$l" != debian ]; then
			lib=/opt/ucx/$l/lib
			[ -f "$lib/libucp.so.0" ] || { echo "FAIL no UCX $l libraries in $lib"; fail=1; return; }
		fi
		log=$(cd "$pkg" && LD_LIBRARY_PATH=$lib "$root/$out/$b/$pkg.test" -test.count=1 -test.timeout=10m 2>&1) || rc=$?
		if [ $rc = 0 ]; then
			echo "PASS $pkg built against $b, run on $l ($(tail -n1 <<<"$log"))"
		else
			echo "$log" | tail -n 40
			echo "FAIL $pkg built against $b, run on $l (exit $rc)"
			fail=1
		fi
	}
	for b in $builds; do
		for l in $RELEASES debian; do
			[ "$l" = "$b" ] && continue
			run "$b" "$l" cgo
			run "$b" "$l" uct
		done
	done
	for p in $pairs; do
		run "${p%%:*}" "${p##*:}" ucp
	done
	exit $fail
fi

# The builds, and the build side of each pair.
for b in $( (printf '%s\n' $builds; for p in $pairs; do echo "${p%%:*}"; done) | sort -u); do
	[ -n "$b" ] || continue
	mkdir -p "$out/$b"
	echo "== building the cgo, uct and ucp test binaries against UCX $b"
	UCX_RELEASE=$b ci/in-rootfs.sh trixie sh -c "for p in cgo uct ucp; do go test -c -o $out/$b/\$p.test ./\$p || exit 1; done"
done
echo "== running them against the other releases"
ci/in-rootfs.sh trixie env RELEASES="$(ci/release.sh --list | tr '\n' ' ')" XREL_BUILDS="$builds" XREL_UCP_PAIRS="$pairs" \
	ci/cross-release.sh --inside

echo "== a program built against Debian trixie's UCX 1.18.1, run on Debian forky's 1.23.0"
ci/in-rootfs.sh trixie go build -o bin/doctor-ucx1.18 ./examples/doctor
report=$(ci/in-rootfs.sh forky ./bin/doctor-ucx1.18 2>&1) || { echo "$report"; die "the 1.18.1 build failed on UCX 1.23.0"; }
echo "$report" | head -n 12
grep -q "loaded.*1\.23\.0" <<<"$report" || die "the doctor does not report the loaded 1.23.0"
echo "ci: cross-release OK"
