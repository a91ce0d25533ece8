#!/usr/bin/env bash
# ci/matrix.sh: one binary, every release. The race test binaries of
# packages cgo, uct, ucp and share are built once, against Debian trixie's UCX
# 1.18.1, and run unchanged on every upstream build of the fixtures folder
# (ci/release.sh --list; LD_LIBRARY_PATH and PKG_CONFIG_PATH changed,
# nothing else, inside the trixie root filesystem) and on Debian forky's
# 1.23.0~rc1 (inside its own root filesystem). MATRIX_RELEASES="1.16.0
# forky" runs a subset ("forky" is Debian's 1.23.0~rc1).
#
# What a build against each release proves (the declarations of
# include/ucxgo differ by release) is kept as a build step: package cgo
# (the only one with C code) is built against each release, every
# package and test is vetted (type-checked) over it, and cgo's tests, the
# ABI self-tests among them (they compare the declarations with the
# release's own headers and libraries), run against the release they were
# built for. ci/cross-release.sh builds every test binary against the
# oldest release and runs it on the others.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=bin/matrix
pkgs="cgo uct ucp share"

if [ "${1:-}" = --run ]; then
	# Inside a root filesystem: run the binaries on release $2 ("debian":
	# the suite's own UCX).
	rel=$2 fail=0
	env=()
	if [ "$rel" != debian ]; then
		lib=/opt/ucx/$rel/lib
		[ -f "$lib/libucp.so.0" ] || die "no UCX $rel libraries in $lib"
		env=(LD_LIBRARY_PATH="$lib" PKG_CONFIG_PATH="$lib/pkgconfig")
	fi
	for p in $pkgs; do
		start=$(date +%s) rc=0
		log=$(cd "$p" && env "${env[@]}" "$root/$out/$p.test" -test.count=1 -test.timeout=15m 2>&1) || rc=$?
		took=$(( $(date +%s) - start ))
		# Judged by what the test runner says: the exit status, a PASS line
		# of its own and no FAIL line. Lines UCX prints to stderr after the
		# runner's PASS (at a worker's destruction by a cleanup, say) are
		# shown, not judged.
		if [ $rc = 0 ] && grep -qx PASS <<<"$log" && ! grep -qE '^(--- )?FAIL' <<<"$log"; then
			after=$(sed -n '/^PASS$/,$p' <<<"$log" | tail -n +2)
			[ -z "$after" ] || printf 'after PASS (not judged):\n%s\n' "$after" | head -n 5
			echo "PASS $p on UCX $rel (${took} s)"
		else
			# The first failures and the panic's first lines (a timeout's
			# goroutine dump is long), then the end of the run.
			grep -E -A 30 '^(--- FAIL|panic: |fatal error: )' <<<"$log" | head -n 120 || true
			echo "[...]"
			tail -n 25 <<<"$log"
			echo "FAIL $p on UCX $rel (exit $rc, ${took} s)"
			fail=1
		fi
	done
	exit $fail
fi

releases=${MATRIX_RELEASES:-$(ci/release.sh --list | tr '\n' ' ') forky}
start=$(date +%s)
echo "== building the race test binaries of $pkgs once, against Debian trixie's UCX 1.18.1"
mkdir -p "$out"
ci/in-rootfs.sh trixie sh -c "for p in $pkgs; do go test -race -c -o $out/\$p.test ./\$p || exit 1; done"
# MATRIX_JOBS releases at a time (default 3): a run spends most of its
# time waiting on sockets and child processes. Each run's output is printed
# whole when it ends.
fail=0
jobs=${MATRIX_JOBS:-3}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
run_release() { # run_release V: the binaries on V, output in $logs/V
	local v=$1 rc=0 t0; t0=$(date +%s)
	if [ "$v" = forky ]; then
		ci/in-rootfs.sh forky ci/matrix.sh --run debian >"$logs/$v" 2>&1 || rc=$?
	else
		ci/in-rootfs.sh trixie ci/matrix.sh --run "$v" >"$logs/$v" 2>&1 || rc=$?
	fi
	echo "== UCX $v: the same binaries, $(( $(date +%s) - t0 )) s" >>"$logs/$v"
	return $rc
}
pids=() names=()
flush() { # wait for the oldest run and print its output
	local rc=0
	wait "${pids[0]}" || rc=$?
	cat "$logs/${names[0]}"
	[ $rc = 0 ] || fail=1
	pids=("${pids[@]:1}") names=("${names[@]:1}")
}
for v in $releases; do
	[ ${#pids[@]} -lt "$jobs" ] || flush
	run_release "$v" & pids+=($!) names+=("$v")
done
while [ ${#pids[@]} -gt 0 ]; do flush; done

echo "== built against each release: package cgo and its tests, every package vetted ($(( $(date +%s) - start )) s)"
for v in $releases; do
	where=(env UCX_RELEASE="$v" ci/in-rootfs.sh trixie)
	[ "$v" = forky ] && where=(ci/in-rootfs.sh forky)
	if "${where[@]}" sh -c "go vet ./... && go test -count=1 ./cgo" >"$out/build-$v.log" 2>&1; then
		echo "PASS build against UCX $v ($(tail -n1 "$out/build-$v.log"))"
	else
		cat "$out/build-$v.log"
		echo "FAIL build against UCX $v"
		fail=1
	fi
done
echo "== matrix done in $(( $(date +%s) - start )) s: $releases"
exit $fail
