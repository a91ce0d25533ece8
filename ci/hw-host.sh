#!/usr/bin/env bash
# ci/hw-host.sh [LISTEN] : the host side of the hardware check (see HARDWARE.md).
# doctor -> export -> serve one importer -> verify its write; PASS/FAIL per step.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
listen=${1:-0.0.0.0:13337}
key=${HW_KEY_FILE:-$root/hw-secret}
. "$root/ci/lib.sh"
fail() { hw_fail "$@"; }
pass() { hw_pass "$@"; }

hw_prepare exporter "no memory domain can export memory keys on this host (see the table above)"

bin/exporter -listen "$listen" -mode export -size "${HW_MIB:-256}" -key-file "$key" -serve 1 &
pid=$!
sleep 1
kill -0 "$pid" 2>/dev/null || { wait "$pid"; fail export "the exporter stopped (its error is above)"; }
pass export "exporting on $listen; now run ci/hw-dpu.sh HOST:${listen##*:} on the DPU"
if wait "$pid"; then
	pass verify "the importer's write verified on the host, key revoked and memory unmapped"
else
	fail verify "the exporter reported a failure (above)"
fi
