#!/usr/bin/env bash
# ci/cross-wire.sh: two processes on different UCX releases over tcp (on
# this machine's network address, host_ip in lib.sh). One
# build of the exporter and importer (package share; the README's main
# job) runs as the host (exporter) on release A and as the DPU (importer)
# on release B, for every pair of XWIRE_RELEASES ("debian" is trixie's
# 1.18.1): the session's handshake, its sealed grants, the UCX wire-up of
# rkey mode, rkey unpack, reads and writes verified on both sides. Prints
# one line per pair and a matrix; fails when a pair ends other than
# expected (see "Across releases on the wire" in docs/behaviour.md):
#   rma        the round trip verified: the importer read and verified
#              "data" and wrote "inbox", the exporter verified the inbox;
#   handshake  the session's handshake refused the pair before UCX
#              connects (1.20 with another minor; 1.22+ with 1.21 or
#              older: UCX does not wire them up, and aborts the listening
#              side when it tries): the importer exits 3 with an error
#              naming both releases, and the exporter counts it refused;
#   unpack     a 1.19+ importer cannot unpack a 1.16-1.18 exporter's rkey
#              (tcp and cma entries): the importer's error says so and
#              names both releases.
# A UCX abort (SIGABRT, an assertion) in either process always fails.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ "${1:-}" != --inside ]; then
	mkdir -p bin/xwire
	ci/in-rootfs.sh trixie sh -c 'go build -o bin/xwire/exporter ./examples/exporter && go build -o bin/xwire/importer ./examples/importer'
	exec ci/in-rootfs.sh trixie env XWIRE_RELEASES="${XWIRE_RELEASES:-$(ci/release.sh --list | tr '\n' ' ')debian}" \
		XWIRE_ADDR="$(host_ip)" ci/cross-wire.sh --inside
fi

releases=$XWIRE_RELEASES
for r in $releases; do
	[ "$r" = debian ] || [ -f "/opt/ucx/$r/lib/libucp.so.0" ] || die "no UCX $r libraries in /opt/ucx/$r/lib"
done
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT
head -c 32 /dev/urandom >"$work/secret"
version() { [ "$1" = debian ] && echo 1.18.1 || echo "$1"; }
minor() { version "$1" | cut -d. -f2; }
lib() { [ "$1" = debian ] || echo "/opt/ucx/$1/lib"; }

fail=0
declare -A cell
for a in $releases; do
	for b in $releases; do
		rm -f "$work/addr"
		LD_LIBRARY_PATH=$(lib "$a") bin/xwire/exporter -listen "$XWIRE_ADDR:0" -size 4 -key-file "$work/secret" \
			-serve 1 -addr-file "$work/addr" -revoke-timeout 2s -json >"$work/exp.json" 2>"$work/exp.log" &
		pid=$!
		for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.05; done
		rc=0
		LD_LIBRARY_PATH=$(lib "$b") timeout 60 bin/xwire/importer -connect "$(cat "$work/addr")" -key-file "$work/secret" \
			-timeout 30s -latency-ops 100 -json >"$work/imp.json" 2>"$work/imp.log" || rc=$?
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill "$pid" 2>/dev/null || true
		erc=0; wait "$pid" 2>/dev/null || erc=$?
		pair="exporter on UCX $(version "$a"), importer on UCX $(version "$b")"
		# A UCX abort in a Go program exits 2 after "SIGABRT"/"SIGSEGV"
		# (or UCX's "Caught signal"); look for it in every log.
		if [ $rc -ge 128 ] || { [ $erc -ge 128 ] && [ $erc != 143 ]; } ||
			grep -qE 'SIGABRT|SIGSEGV|Caught signal|Assertion .* failed|ucs_fatal' "$work"/imp.* "$work"/exp.*; then
			got=abort
		elif [ $rc = 0 ] && grep -q '"read_verified":true' "$work/imp.json" && grep -q '"inbox_written":true' "$work/imp.json" &&
			grep -q '"inbox_verified":1,' "$work/exp.json"; then
			got=rma
		elif [ $rc = 3 ] && grep -q 'session refused' "$work/imp.log" && grep -qF "$pair:" "$work/imp.log" &&
			grep -q '"refused":1,' "$work/exp.json"; then
			got=handshake
		elif grep -q "cannot unpack a key packed by UCX 1.16 to 1.18" "$work/imp.log" && grep -qF "($pair)" "$work/imp.log"; then
			got=unpack
		else
			got="fail(rc=$rc)"
		fi
		ma=$(minor "$a"); mb=$(minor "$b")
		want=rma
		if [ "$ma" != "$mb" ] && { [ "$ma" = 20 ] || [ "$mb" = 20 ] || [ $((ma >= 22)) != $((mb >= 22)) ]; }; then
			want=handshake
		elif [ "$ma" -le 18 ] && [ "$mb" -ge 19 ]; then
			want=unpack
		fi
		cell[$a,$b]=$got
		verdict=ok
		if [ "$got" != "$want" ]; then
			verdict="UNEXPECTED (want $want)"; fail=1
			sed 's/^/    importer: /' "$work/imp.log" "$work/imp.json" | tail -n 8
			sed 's/^/    exporter: /' "$work/exp.log" "$work/exp.json" | tail -n 8
		fi
		case $got in
		handshake | unpack) echo "    $(grep -m1 '^importer: ' "$work/imp.log")" ;;
		esac
		echo "exporter UCX $a, importer UCX $b: $got $verdict"
	done
done
echo
echo "exporter (rows) x importer (columns):"
printf '%-8s' ""; for b in $releases; do printf '%-11s' "$b"; done; echo
for a in $releases; do
	printf '%-8s' "$a"; for b in $releases; do printf '%-11s' "${cell[$a,$b]}"; done; echo
done
exit $fail
