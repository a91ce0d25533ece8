#!/usr/bin/env bash
# ci/cross-wire.sh: two processes on different UCX releases over tcp. One
# build of the exporter and importer (the README's main job) runs as the
# host (exporter) on release A and as the DPU (importer) on release B, for
# every pair of XWIRE_RELEASES ("debian" is trixie's 1.18.1): worker wire-up
# through a listener, active messages (the envelope), rkey pack and unpack,
# put and get, verified on both sides. Prints one line per pair and a
# matrix; fails when a pair ends other than as XWIRE_EXPECT says (default:
# RMA works between releases on the same side of 1.19, and a 1.19+ importer
# refuses a 1.16-1.18 exporter's key with the binding's error, no abort).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ "${1:-}" != --inside ]; then
	mkdir -p bin/xwire
	ci/in-rootfs.sh trixie sh -c 'go build -o bin/xwire/exporter ./examples/exporter && go build -o bin/xwire/importer ./examples/importer'
	exec ci/in-rootfs.sh trixie env ${XWIRE_RELEASES:+XWIRE_RELEASES="$XWIRE_RELEASES"} ci/cross-wire.sh --inside
fi

releases=${XWIRE_RELEASES:-$(ls /opt/ucx | sort -V | tr '\n' ' ')debian}
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
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		if [ $rc = 0 ] && grep -q '"read_verified":true' "$work/imp.log" && grep -q '"write_verified_by_exporter":true' "$work/imp.log"; then
			got=rma
		elif grep -q "cannot unpack a key packed by UCX 1.16 to 1.18" "$work/imp.log"; then
			got=refused
		else
			got="fail(rc=$rc)"
		fi
		want=rma
		if [ "$(minor "$a")" -le 18 ] && [ "$(minor "$b")" -ge 19 ]; then want=refused; fi
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
printf '%-10s' "exp\\imp"; for b in $releases; do printf '%-9s' "$b"; done; echo
for a in $releases; do
	printf '%-10s' "$a"; for b in $releases; do printf '%-9s' "${cell[$a,$b]}"; done; echo
done
exit $fail
