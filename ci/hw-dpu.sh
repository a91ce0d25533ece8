#!/usr/bin/env bash
# ci/hw-dpu.sh HOST:PORT : the DPU side of the hardware check (see HARDWARE.md).
# doctor -> envelope -> import -> RDMA on host memory -> verify; PASS/FAIL per step.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${1:?usage: ci/hw-dpu.sh HOST:PORT}
key=${HW_KEY_FILE:-$root/hw-secret}
fail() { echo "FAIL $1: $2"; exit 1; }
pass() { echo "PASS $1: $2"; }

mkdir -p bin
for p in doctor importer; do go build -o "bin/$p" "./examples/$p" || fail build "go build ./examples/$p (needs a supported UCX installed: see README)"; done
[ -s "$key" ] || fail key "no HMAC key in $key (the same file as on the host)"

report=$(bin/doctor -json) || fail doctor "doctor failed: $report"
if grep -q '"export_capable": 0' <<<"$report"; then
	bin/doctor >&2
	fail doctor "no memory domain here has UCT_MD_FLAG_EXPORTED_MKEY: importing would be refused (UCX aborts on a matching MD that cannot export)"
fi
pass doctor "an export-capable memory domain is present"

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
