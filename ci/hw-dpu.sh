#!/usr/bin/env bash
# ci/hw-dpu.sh HOST:PORT : the DPU side of the hardware check (see HARDWARE.md).
# doctor -> envelope -> import -> RDMA on host memory -> verify; PASS/FAIL per step.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${1:?usage: ci/hw-dpu.sh HOST:PORT}
key=${HW_KEY_FILE:-$root/hw-secret}
. "$root/ci/lib.sh"
fail() { hw_fail "$@"; }
pass() { hw_pass "$@"; }

hw_prepare importer "no memory domain here has UCT_MD_FLAG_EXPORTED_MKEY: importing would be refused (UCX aborts on a matching MD that cannot export)"

out=$(bin/importer -connect "$target" -mode export -key-file "$key" -json 2>&1)
code=$?
case $code in
0) ;;
3) fail envelope "$out" ;;
4) fail verify "$out" ;;
*) fail import "$out" ;;
esac
pass envelope "magic, version, HMAC and lease checked"
pass import "descriptor validated and imported"
grep -q '"read_verified":true' <<<"$out" && pass rdma "host memory read over RDMA, pattern verified" || fail rdma "$out"
grep -q '"write_verified_by_exporter":true' <<<"$out" && pass verify "write verified by the host" || fail verify "$out"
echo "$out"
