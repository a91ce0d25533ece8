#!/usr/bin/env bash
# ci/in-rootfs.sh SUITE CMD...: run CMD inside the cached SUITE root filesystem
# with /proc, /sys, /dev, /dev/shm, this repository, the Go toolchain and the
# Go caches bind-mounted at the same paths. In the trixie root filesystem,
# every unpacked upstream UCX build (ci/release.sh) is mounted at
# /opt/ucx/VERSION; UCX_RELEASE=VERSION points pkg-config and the loader at
# one of them, as a user with UCX installed in a prefix would
# (PKG_CONFIG_PATH and LD_LIBRARY_PATH, nothing else). The mounts live in a private mount
# namespace (unshare -m), so they vanish with the process on exit, on failure,
# on Ctrl-C and even on SIGKILL; the trap also unmounts them explicitly.
# A file the user names for the command (out_vars below: BENCH_JSON=FILE)
# lands where the user asked: a relative name is taken from the directory
# this script starts in (make's: the repository root, also with make -C),
# its directory must exist on the host, and that directory is
# bind-mounted at the same path inside.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

suite=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)

# The variables passed through (below) that name a file on the user's
# side: the bench's JSON, and the baseline it compares with (or writes,
# with BENCH_BASELINE=update).
out_vars="BENCH_JSON BENCH_BASELINE_FILE"
# Before anything runs, outside the namespace: each becomes an absolute
# name without symbolic links in its directory, which must exist. A
# directory the root filesystem needs for itself is refused: the bind
# mount would hide the root filesystem's own.
if [ -z "${UCXGO_IN_NS:-}" ]; then
	for var in $out_vars; do
		val=${!var:-}
		[ -n "$val" ] || continue
		case $val in /*) abs=$val ;; *) abs=$PWD/$val ;; esac
		base=${abs##*/}
		case $base in ''|.|..) die "$var=$val: names a directory, not a file" ;; esac
		dir=${abs%/*}
		[ -d "${dir:-/}" ] || die "$var=$val: no directory ${dir:-/} on this machine (create it first)"
		dir=$(cd "${dir:-/}" && pwd -P)
		dir=${dir%/}
		rootfs_dir=$(suite_dir "$suite")
		case $dir/ in
		/|/usr/*|/etc/*|/bin/*|/sbin/*|/lib/*|/lib32/*|/lib64/*|/boot/*|/proc/*|/sys/*|/var/lib/*|/opt/ucx/*)
			die "$var=$val: $dir is a directory of the root filesystem itself; name a file elsewhere (under /tmp, the repository, your home)" ;;
		"$rootfs_dir"/*) die "$var=$val: $dir is inside the $suite root filesystem's cache" ;;
		esac
		case $rootfs_dir/ in "$dir"/*) die "$var=$val: $dir holds the $suite root filesystem's cache" ;; esac
		export "$var=$dir/$base"
	done
fi
rootfs=$("$root/ci/rootfs.sh" "$suite")
goroot=$(go env GOROOT)
gomodcache=$(go env GOMODCACHE)
# One build cache for every suite and release: Go's cache key does not
# cover the content of system headers, but it does cover CGO_CFLAGS, which
# name the suite and the release (below), so objects built against one UCX
# never serve another, while the standard library, the race runtime and
# the modules are built once.
gocache=$(dirname "$(go env GOCACHE)")/ucx-go-build
mkdir -p "$gomodcache" "$gocache"
releases=()
if [ "$suite" = trixie ]; then
	for v in $("$root/ci/release.sh" --list); do releases+=("$v"); done
fi
if [ -n "${UCX_RELEASE:-}" ]; then
	[ "$suite" = trixie ] || die "UCX_RELEASE needs the trixie root filesystem (the builds link against its libc), not $suite"
	[[ " ${releases[*]} " == *" $UCX_RELEASE "* ]] || die "no UCX $UCX_RELEASE build to test against (have: ${releases[*]})"
fi

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
for v in "${releases[@]}"; do
	dir=$("$root/ci/release.sh" "$v") || die "cannot unpack UCX $v"
	bind "$dir/opt/ucx/$v" "/opt/ucx/$v"
done
# The directories of the user's files (made absolute above), each at its
# own path, unless it is already there: in the repository or under /dev.
# A symbolic link on the way inside would lead the mount out of the root
# filesystem (trixie's /lib, for one): refused.
bound=" "
for var in $out_vars; do
	[ -n "${!var:-}" ] || continue
	dir=${!var%/*}
	dir=${dir:-/}
	case $dir/ in "$root"/*|/dev/*) continue ;; esac
	[[ "$bound" == *" $dir "* ]] && continue
	p=$rootfs
	IFS=/ read -ra parts <<<"${dir#/}"
	for part in "${parts[@]}"; do
		p=$p/$part
		[ -L "$p" ] && die "$var=${!var}: ${p#"$rootfs"} is a symbolic link in the $suite root filesystem; name a file elsewhere"
	done
	bind "$dir"
	bound="$bound$dir "
done

# Go's build cache does not hash C headers outside a package's directory:
# key cgo builds on include/ and the UCX release pkg-config finds inside
# (below), in the very form the Makefile uses, so that a command run here
# directly and make's targets share what they compiled.
cgo_cflags="-O2 -g -DUCXGO_HEADERS_$(cat "$root"/include/ucxgo/*.h | sha256sum | cut -c1-16)=1"
# Without UCX_RELEASE, UCXGO_ROOTFS tells ci/run.sh it is inside; with it,
# ci/run.sh finds the release through pkg-config as on a user's machine.
release_env=(UCXGO_ROOTFS="$suite")
if [ -n "${UCX_RELEASE:-}" ]; then
	release_env=(PKG_CONFIG_PATH="/opt/ucx/$UCX_RELEASE/lib/pkgconfig" LD_LIBRARY_PATH="/opt/ucx/$UCX_RELEASE/lib")
fi

# Settings passed through to the command inside, when set.
for var in GOEXPERIMENT TESTFLAGS GOTEST_FLAGS TEST_PKGS UCX_TLS UCX_NET_DEVICES \
	BENCH_JSON BENCH_BASELINE BENCH_BASELINE_FILE BENCH_SHORT BENCH_PAIRS BENCH_ITERS BENCH_PIN BENCH_TIMEOUT BENCH_PERFTEST_TIMEOUT BENCH_IDLE DEMO_MIB DEMO_PASSES DEMO_ROTATE FUZZTIME STRESS_TIME GORACE UCXGO_STRESS UCXGO_ROUNDS UCXGO_CLOSE_ORDERS; do
	[ -n "${!var:-}" ] && release_env+=("$var=${!var}")
done

cd "$root"
chroot "$rootfs" /usr/bin/env -i \
	HOME=/root TERM="${TERM:-dumb}" PATH="$goroot/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	GOROOT="$goroot" GOMODCACHE="$gomodcache" GOCACHE="$gocache" GOPROXY=off GOTOOLCHAIN=local \
	CGO_CFLAGS="$cgo_cflags" CI="${CI:-}" "${release_env[@]}" \
	/bin/sh -c 'CGO_CFLAGS="$CGO_CFLAGS -DUCXGO_UCX_$(pkg-config --modversion ucx | tr -c "0-9\n" _)=1" && export CGO_CFLAGS &&
		cd "$1" && shift && exec "$@"' sh "$root" "$@"
