#!/usr/bin/env bash
# ci/demo.sh: the main job. Builds the exporter and importer (package
# share) and runs them on loopback: the exporter shares "data" (read-only,
# a pattern) and "inbox" (writable), -size DEMO_MIB MiB each, and rotates
# the grants of "data" every DEMO_ROTATE; the importer reads "data"
# DEMO_PASSES times across those rotations and verifies it, writes
# "inbox" as many times, times 8-byte reads, then holds its session; SIGTERM makes the
# exporter revoke it, wait for its acknowledgement and check the inbox.
# Fails on any mismatch, a missed rotation or an unacknowledged revoke.
# Runs where a supported UCX is (see ci/run.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p bin
go build -o bin/exporter ./examples/exporter
go build -o bin/importer ./examples/importer
go build -o bin/doctor ./examples/doctor

work=$(mktemp -d)
exporter_pid= importer_pid=
cleanup() {
	for p in $importer_pid $exporter_pid; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "demo: FAIL: $*" >&2; sed 's/^/    /' "$work"/*.log "$work"/*.json >&2 2>/dev/null || true; exit 1; }
head -c 32 /dev/urandom >"$work/secret"

echo "== doctor"
bin/doctor
echo "== exporter (background) and importer on loopback"
bin/exporter -listen 127.0.0.1:0 -size "${DEMO_MIB:-64}" -key-file "$work/secret" -rotate-every "${DEMO_ROTATE:-20ms}" \
	-addr-file "$work/addr" -json >"$work/exporter.json" 2>"$work/exporter.log" &
exporter_pid=$!
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
[ -s "$work/addr" ] || fail "the exporter did not start listening"
bin/importer -connect "$(cat "$work/addr")" -key-file "$work/secret" -passes "${DEMO_PASSES:-16}" -hold -json \
	>"$work/importer.json" 2>"$work/importer.log" &
importer_pid=$!
# The importer says when its run is complete; then the exporter is told
# to revoke it and stop.
for _ in $(seq 600); do
	grep -q 'holding the session' "$work/importer.log" && break
	kill -0 "$importer_pid" 2>/dev/null || break
	sleep 0.1
done
# Where the parts run, while the session is open: the exporter's process
# listens on its control port only, the importer's on nothing; each side
# of the session has its data path in a process of its own
# (docs/security.md).
ports() { # the TCP ports process $1 listens on
	local ino
	ino=$(ls -l "/proc/$1/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ')
	for h in $(cat "/proc/$1/net/tcp" "/proc/$1/net/tcp6" 2>/dev/null | awk -v ino=" $ino" '
		$4 == "0A" && index(ino, " " $10 " ") { split($2, a, ":"); print a[2] }'); do
		printf '%d ' "0x$h"
	done
}
kids() { # the processes whose parent is $1
	for f in /proc/[0-9]*/stat; do
		awk -v p="$1" '{ sub(/.*\) /, ""); if ($2 == p) print FILENAME }' "$f" 2>/dev/null
	done | sed 's#/proc/\([0-9]*\)/stat#\1#'
}
echo "== where the parts run (the session open)"
exp_ports=$(ports "$exporter_pid")
echo "exporter: pid $exporter_pid, TCP ports it listens on: ${exp_ports:-none} (its control listener; no UCX worker in this process)"
ndp=0
for k in $(kids "$exporter_pid"); do
	ndp=$((ndp + 1))
	echo "  data path: pid $k, child of the exporter ($(tr '\0' ' ' <"/proc/$k/cmdline")), TCP ports: $(ports "$k")(its UCX worker, for this session's importer)"
done
imp_ports=$(ports "$importer_pid")
echo "importer: pid $importer_pid, TCP ports it listens on: ${imp_ports:-none} (no UCX worker in this process)"
nip=0
for k in $(kids "$importer_pid"); do
	nip=$((nip + 1))
	echo "  data path: pid $k, child of the importer, TCP ports: $(ports "$k")(its UCX worker, connected to the exporter's data path only)"
done
[ "$(wc -w <<<"$exp_ports")" = 1 ] && [ "${exp_ports% }" = "$(sed 's/.*://' "$work/addr")" ] ||
	fail "the exporter's process listens on more than its control port: $exp_ports"
if grep -q 'mode rkey' "$work/exporter.log"; then
	[ "$ndp" -ge 1 ] || fail "no data-path process runs for the session"
	[ "$nip" -ge 1 ] || fail "no data-path process runs for the importer"
	[ -z "$imp_ports" ] || fail "the importer's process listens on TCP ports: $imp_ports"
fi
kill -TERM "$exporter_pid" 2>/dev/null || true
irc=0; wait "$importer_pid" || irc=$?
importer_pid=
erc=0; wait "$exporter_pid" || erc=$?
exporter_pid=
cat "$work/exporter.log" "$work/importer.log"
echo "importer: $(cat "$work/importer.json")"
echo "exporter: $(cat "$work/exporter.json")"
[ "$irc" = 0 ] || fail "the importer exited with status $irc"
[ "$erc" = 0 ] || fail "the exporter exited with status $erc"
imp=$(cat "$work/importer.json") exp=$(cat "$work/exporter.json")
num() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" <<<"$2"; }
grep -q '"read_verified":true' <<<"$imp" && grep -q '"inbox_written":true' <<<"$imp" || fail "the importer's read or write did not complete"
[ "$(num inbox_verified "$exp")" -ge 1 ] && [ "$(num inbox_failed "$exp")" = 0 ] || fail "the exporter did not verify the inbox"
[ "$(num rotations "$imp")" -ge 1 ] || fail "no rotation of \"data\" happened during the importer's reads"
grep -q '"revoked":true' <<<"$imp" || fail "the importer was not revoked"
[ "$(num revoked_at_exit "$exp")" -ge 1 ] && grep -q '"every_importer_acknowledged":true' <<<"$exp" ||
	fail "the exporter's revoke was not acknowledged"
# The secret never shows in the programs' output, in hex or base64 (the
# package's errors and counters are checked by share/secrets_test.go).
hexsecret=$(od -An -tx1 "$work/secret" | tr -d ' \n') b64secret=$(base64 -w0 "$work/secret")
cat "$work"/*.log "$work"/*.json | tr 'A-F' 'a-f' | grep -qF -e "${hexsecret:0:32}" -e "${hexsecret:32:32}" && fail "the secret appears in the programs' output"
cat "$work"/*.log "$work"/*.json | grep -qF -e "${b64secret:0:20}" -e "${b64secret:20:20}" && fail "the secret appears in the programs' output"
mode=$(sed -n 's/.*"mode":"\([a-z]*\)".*/\1/p' <<<"$imp")
read_gbps=$(num read_gbps "$imp") write_gbps=$(num write_gbps "$imp")
echo "demo: read $(printf %.2f "$read_gbps") GB/s across $(num rotations "$imp") rotation(s), write $(printf %.2f "$write_gbps") GB/s (read/write $(awk -v r="$read_gbps" -v w="$write_gbps" 'BEGIN { printf "%.2f", r / w }')), passes after the first; first pass: read $(printf %.2f "$(num first_read_gbps "$imp")"), write $(printf %.2f "$(num first_write_gbps "$imp")") GB/s"
echo "demo: PASS: $mode mode: data read and verified, inbox written and verified by the exporter, revoke acknowledged"
