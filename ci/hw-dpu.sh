#!/usr/bin/env bash
# ci/hw-dpu.sh HOST:PORT : the DPU side of the hardware check (see HARDWARE.md).
# doctor -> session (sealed grants) -> import -> RDMA on host memory across
# rotations -> write the inbox; PASS/FAIL per step.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${1:?usage: ci/hw-dpu.sh HOST:PORT}
key=${HW_KEY_FILE:-$root/hw-secret}
. "$root/ci/lib.sh"
fail() { hw_fail "$@"; }
pass() { hw_pass "$@"; }

hw_prepare importer "no memory domain here has UCT_MD_FLAG_EXPORTED_MKEY: importing would be refused (UCX aborts on a matching MD that cannot export)"

errs=$(mktemp)
trap 'rm -f "$errs"' EXIT
out=$(bin/importer -connect "$target" -mode export -key-file "$key" -passes "${HW_PASSES:-32}" -json 2>"$errs")
code=$?
case $code in
0) ;;
3) fail session "$(cat "$errs")" ;;
4) fail rdma "$(cat "$errs") $out" ;;
*) fail import "$(cat "$errs") $out" ;;
esac
pass session "handshake (protocol, both UCX releases, export mode), proof of the shared secret, sealed grants checked"
pass import "the descriptors of data and inbox validated and imported"
rotations=$(sed -n 's/.*"rotations":\([0-9]*\).*/\1/p' <<<"$out")
grep -q '"read_verified":true' <<<"$out" && pass rdma "host memory read over RDMA, pattern verified, across ${rotations:-0} rotation(s)" || fail rdma "$out"
grep -q '"inbox_written":true' <<<"$out" && pass write "inbox written into host memory (the host's verify step checks it)" || fail write "$out"
echo "$out"
