#!/usr/bin/env bash
# ci/demo.sh: the main job. Builds the exporter and importer, runs the
# exporter in the background on loopback and the importer against it, and
# fails on any mismatch. Runs where a supported UCX is (see ci/run.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p bin
go build -o bin/exporter ./examples/exporter
go build -o bin/importer ./examples/importer
go build -o bin/doctor ./examples/doctor

work=$(mktemp -d)
exporter_pid=
cleanup() {
	[ -n "$exporter_pid" ] && kill "$exporter_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom >"$work/secret"

echo "== doctor"
bin/doctor
echo "== exporter (background) and importer on loopback"
bin/exporter -listen 127.0.0.1:0 -size "${DEMO_MIB:-64}" -key-file "$work/secret" -serve 1 -addr-file "$work/addr" &
exporter_pid=$!
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
[ -s "$work/addr" ] || { echo "demo: the exporter did not start listening" >&2; exit 1; }
bin/importer -connect "$(cat "$work/addr")" -key-file "$work/secret" -json >"$work/summary.json" || {
	echo "demo: the importer failed" >&2; exit 1; }
wait "$exporter_pid"
exporter_pid=
mode=$(sed -n 's/.*"mode":"\([a-z]*\)".*/\1/p' "$work/summary.json")
why=$(sed -n 's/.*"why":"\([^"]*\)".*/\1/p' "$work/summary.json")
cat "$work/summary.json"
grep -q '"read_verified":true' "$work/summary.json" && grep -q '"write_verified_by_exporter":true' "$work/summary.json" ||
	{ echo "demo: FAIL: round trip not verified" >&2; exit 1; }
echo "demo: PASS: $mode mode ran ($why)"
