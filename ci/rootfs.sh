#!/usr/bin/env bash
# ci/rootfs.sh SUITE: build (once) and cache a Debian root filesystem of SUITE
# (trixie: UCX 1.18.1, forky: UCX 1.23.0~rc1) holding ci/packages.txt.
# Prints the directory. A second call with the same package list reuses it.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

suite=${1:-trixie}
dir=$(suite_dir "$suite")
pkgs=$(packages)
stamp="suite=$suite packages=$(echo "$pkgs" | sha256sum | cut -c1-16)"

if [ -f "$dir/.ucx-go-stamp" ] && [ "$(cat "$dir/.ucx-go-stamp")" = "$stamp" ]; then
	echo "$dir"
	exit 0
fi

[ "$(id -u)" = 0 ] || die "building the $suite root filesystem needs root (or install UCX >= 1.18 and run natively)"

if ! command -v mmdebstrap >/dev/null; then
	echo "ci: installing mmdebstrap" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2
fi

mirror=${UCX_MIRROR:-$(host_mirror)}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "ci: building the $suite root filesystem in $dir (mirror from the host's apt configuration)" >&2
mkdir -p "$(dirname "$dir")"
tmp="$dir.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
# The host's mirror may be a frozen snapshot whose Release files have expired.
mmdebstrap --variant=minbase --mode=root --keyring="$keyring" \
	--aptopt='Acquire::Check-Valid-Until "false"' \
	--include="$(echo "$pkgs" | tr ' ' ',' | sed 's/,$//')" \
	"$suite" "$tmp" "deb $mirror $suite main" >&2
# Minimal root filesystems have no /etc/hosts; UCX and tests resolve localhost.
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' >"$tmp/etc/hosts"
rm -rf "$dir"
echo "$stamp" >"$tmp/.ucx-go-stamp"
mv "$tmp" "$dir"
trap - EXIT
echo "ci: $suite root filesystem ready in $(( $(date +%s) - start )) s" >&2
echo "$dir"
