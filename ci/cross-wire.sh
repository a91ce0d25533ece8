#!/usr/bin/env bash
# ci/cross-wire.sh: two processes on different UCX releases over tcp. One
# build of the exporter and importer (the README's main job) runs as the
# host (exporter) on release A and as the DPU (importer) on release B, for
# every pair of XWIRE_RELEASES ("debian" is trixie's 1.18.1): worker wire-up
# through a listener, active messages (the envelope), rkey pack and unpack,
# put and get, verified on both sides. Prints one line per pair and a
# matrix; fails when a pair ends other than as measured on 2026-12-03 (see
# "Across releases on the wire" in docs/behaviour.md): "rma" (round trip verified),
# "refused" (a 1.19+ importer refuses a 1.16-1.18 exporter's key with the
# binding's error), "unreachable" (UCX's wire-up between 1.20.1 or 1.22.0
# and another minor fails, and both sides get an error), "abort" (UCX
# itself aborts the listening exporter during that wire-up: an assertion in
# wireup.c, when the importer runs 1.20.1 or the exporter 1.22.0 against
# another minor; a Go binding cannot catch it). Any other abort fails.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ "${1:-}" != --inside ]; then
	mkdir -p bin/xwire
	ci/in-rootfs.sh trixie sh -c 'go build -o bin/xwire/exporter ./examples/exporter && go build -o bin/xwire/importer ./examples/importer'
	exec ci/in-rootfs.sh trixie env XWIRE_RELEASES="${XWIRE_RELEASES:-$(ci/release.sh --list | tr '\n' ' ')debian}" ci/cross-wire.sh --inside
fi

releases=$XWIRE_RELEASES
for r in $releases; do
	[ "$r" = debian ] || [ -f "/opt/ucx/$r/lib/libucp.so.0" ] || die "no UCX $r libraries in /opt/ucx/$r/lib"
done
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT
head -c 32 /dev/urandom >"$work/secret"
minor() { [ "$1" = debian ] && echo 18 || echo "$1" | cut -d. -f2; }
lib() { [ "$1" = debian ] || echo "/opt/ucx/$1/lib"; }

fail=0
declare -A cell
for a in $releases; do
	for b in $releases; do
		rm -f "$work/addr"
		LD_LIBRARY_PATH=$(lib "$a") bin/xwire/exporter -listen 127.0.0.1:0 -size 4 -key-file "$work/secret" \
			-serve 1 -addr-file "$work/addr" -revoke-timeout 2s >"$work/exp.log" 2>&1 &
		pid=$!
		for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.05; done
		rc=0
		LD_LIBRARY_PATH=$(lib "$b") timeout 60 bin/xwire/importer -connect "$(cat "$work/addr")" -key-file "$work/secret" \
			-timeout 10s -latency-ops 100 -json >"$work/imp.log" 2>&1 || rc=$?
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill "$pid" 2>/dev/null || true
		erc=0; wait "$pid" 2>/dev/null || erc=$?
		# A UCX abort in a Go program exits 2 after "SIGABRT"/"SIGSEGV"
		# (or UCX's "Caught signal"); look for it in both logs.
		if [ $rc -ge 128 ] || { [ $erc -ge 128 ] && [ $erc != 143 ]; } ||
			grep -qE 'SIGABRT|SIGSEGV|Caught signal|Assertion .* failed|ucs_fatal' "$work/imp.log" "$work/exp.log"; then
			got=abort
		elif [ $rc = 0 ] && grep -q '"read_verified":true' "$work/imp.log" && grep -q '"write_verified_by_exporter":true' "$work/imp.log"; then
			got=rma
		elif grep -q "cannot unpack a key packed by UCX 1.16 to 1.18" "$work/imp.log"; then
			got=refused
		elif grep -q "exporter connection failed" "$work/imp.log"; then
			got=unreachable
		else
			got="fail(rc=$rc)"
		fi
		ma=$(minor "$a"); mb=$(minor "$b")
		want=rma
		if [ "$ma" != "$mb" ] && { [ "$mb" = 20 ] || [ "$ma" = 22 ]; }; then
			want=abort
		elif [ "$ma" != "$mb" ] && { [ "$ma" = 20 ] || [ "$mb" = 22 ]; }; then
			want=unreachable
		elif [ "$ma" -le 18 ] && [ "$mb" -ge 19 ]; then
			want=refused
		fi
		cell[$a,$b]=$got
		verdict=ok
		if [ "$got" != "$want" ]; then
			verdict="UNEXPECTED (want $want)"; fail=1
			sed 's/^/    importer: /' "$work/imp.log" | tail -n 8
			sed 's/^/    exporter: /' "$work/exp.log" | tail -n 8
		fi
		[ "$got" = refused ] && echo "    $(grep -o 'ucp: unpack rkey.*' "$work/imp.log" | head -n1 | cut -c1-300)"
		echo "exporter UCX $a, importer UCX $b: $got $verdict"
	done
done
echo
echo "exporter (rows) x importer (columns):"
printf '%-8s' ""; for b in $releases; do printf '%-12s' "$b"; done; echo
for a in $releases; do
	printf '%-8s' "$a"; for b in $releases; do printf '%-12s' "${cell[$a,$b]}"; done; echo
done
exit $fail
