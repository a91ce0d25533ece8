#!/usr/bin/env bash
# ci/check-version-mismatch.sh: prove the run-time version guard with real
# libraries: a program built against trixie's UCX 1.18 is run inside the
# forky root filesystem (UCX 1.23, same soname libucp.so.0). UCX itself only
# warns; ucx-go must refuse with an error naming both releases.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)

mkdir -p "$root/bin"
"$root/ci/in-rootfs.sh" trixie go build -o bin/doctor-ucx1.18 ./examples/doctor
set +e
out=$("$root/ci/in-rootfs.sh" forky ./bin/doctor-ucx1.18 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" -ne 0 ] || die "a 1.18 build ran against UCX 1.23 without an error"
grep -qF "built against UCX 1.18.1 but the loaded libucx is 1.23.0" <<<"$out" ||
	die "the mismatch error does not name both releases"
echo "ci: run-time version guard OK: a 1.18 build refuses to run on UCX 1.23"
