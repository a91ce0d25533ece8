#!/usr/bin/env bash
# ci/hw-host.sh [LISTEN] : the host side of the hardware check (see HARDWARE.md).
# doctor -> share two regions in export mode, rotating "data" -> serve one
# importer -> verify what it wrote into "inbox"; PASS/FAIL per step.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
listen=${1:-0.0.0.0:13337}
key=${HW_KEY_FILE:-$root/hw-secret}
. "$root/ci/lib.sh"
fail() { hw_fail "$@"; }
pass() { hw_pass "$@"; }

hw_prepare exporter "no memory domain can export memory keys on this host (see the table above)"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Progress (sessions, rotations, the inbox check, the revoke) goes to
# stderr, here the terminal; the JSON summary to $out.
bin/exporter -listen "$listen" -mode export -size "${HW_MIB:-256}" -key-file "$key" -serve 1 \
	-rotate-every "${HW_ROTATE:-200ms}" -json >"$out" &
pid=$!
sleep 1
kill -0 "$pid" 2>/dev/null || { wait "$pid"; fail export "the exporter stopped (its error is above)"; }
pass export "sharing data and inbox (${HW_MIB:-256} MiB each) in export mode on $listen; now run ci/hw-dpu.sh HOST:${listen##*:} on the DPU"
wait "$pid"
code=$?
sum=$(cat "$out")
case $code in
0) ;;
4) fail verify "the inbox did not hold the importer's pattern (the first bad byte is above): $sum" ;;
*) fail verify "the exporter failed with status $code (its error is above): $sum" ;;
esac
grep -q '"inbox_verified":[1-9]' <<<"$sum" || fail verify "the importer's session ended without writing the inbox: $sum"
pass verify "the importer's write into inbox verified on the host; registrations unmapped"
echo "$sum"
