#!/usr/bin/env bash
# ci/in-rootfs.sh SUITE CMD...: run CMD inside the cached SUITE root filesystem
# with /proc, /sys, /dev, /dev/shm, this repository, the Go toolchain and the
# Go caches bind-mounted at the same paths. The mounts live in a private mount
# namespace (unshare -m), so they vanish with the process on exit, on failure,
# on Ctrl-C and even on SIGKILL; the trap also unmounts them explicitly.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

suite=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
rootfs=$("$root/ci/rootfs.sh" "$suite")
goroot=$(go env GOROOT)
gomodcache=$(go env GOMODCACHE)
# One build cache per suite: Go's cache key does not cover the content of
# system headers, so objects built against one UCX must not serve the other.
gocache=$(dirname "$(go env GOCACHE)")/ucx-go-build-$suite
mkdir -p "$gomodcache" "$gocache"

if [ -z "${UCXGO_IN_NS:-}" ]; then
	# Modules are fetched on the host; inside, the build is offline.
	(cd "$root" && go mod download)
	export UCXGO_IN_NS=1
	exec unshare --mount --propagation private -- "$0" "$suite" "$@"
fi

mounted=()
cleanup() {
	local i
	for (( i=${#mounted[@]}-1; i>=0; i-- )); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bind() { # bind SRC [DST-inside]
	local dst="$rootfs${2:-$1}"
	mkdir -p "$dst"
	mount --rbind "$1" "$dst"
	mounted+=("$dst")
}
# The root must be a mount point of its own for `ip netns exec` (it makes /
# a slave mount); /run is a fresh tmpfs for network-namespace handles.
mount --bind "$rootfs" "$rootfs"; mounted+=("$rootfs")
mkdir -p "$rootfs/proc"
mount -t proc proc "$rootfs/proc"; mounted+=("$rootfs/proc")
mount -t tmpfs tmpfs "$rootfs/run"; mounted+=("$rootfs/run")
bind /sys
bind /dev
bind /dev/shm
bind "$root"
bind "$goroot"
bind "$gomodcache"
bind "$gocache"

# Go's build cache does not hash C headers outside a package's directory:
# key cgo builds on include/ and the suite (the Makefile does the same).
cgo_cflags="-O2 -g -DUCXGO_HEADERS_$(cat "$root"/include/ucxgo/*.h | sha256sum | cut -c1-16)=1 -DUCXGO_SUITE_$suite=1"

cd "$root"
chroot "$rootfs" /usr/bin/env -i \
	HOME=/root TERM="${TERM:-dumb}" PATH="$goroot/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	GOROOT="$goroot" GOMODCACHE="$gomodcache" GOCACHE="$gocache" GOPROXY=off GOTOOLCHAIN=local \
	CGO_CFLAGS="${CGO_CFLAGS:-$cgo_cflags}" \
	CI="${CI:-}" UCXGO_ROOTFS="$suite" \
	${GOEXPERIMENT:+GOEXPERIMENT=$GOEXPERIMENT} ${TESTFLAGS:+TESTFLAGS="$TESTFLAGS"} \
	${UCX_TLS:+UCX_TLS=$UCX_TLS} ${UCX_NET_DEVICES:+UCX_NET_DEVICES=$UCX_NET_DEVICES} \
	${BENCH_JSON:+BENCH_JSON=$BENCH_JSON} ${BENCH_SHORT:+BENCH_SHORT=$BENCH_SHORT} \
	${BENCH_PAIRS:+BENCH_PAIRS=$BENCH_PAIRS} ${BENCH_ITERS:+BENCH_ITERS=$BENCH_ITERS} \
	${FUZZTIME:+FUZZTIME=$FUZZTIME} \
	/bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$root" "$@"
