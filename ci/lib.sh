# Shared helpers for the ci/ scripts (sourced, not run).

die() { echo "ci: $*" >&2; exit 1; }

# suite_dir SUITE: where the root filesystem of SUITE is cached.
suite_dir() {
	echo "${UCX_ROOTFS_CACHE:-/var/cache/ucx-go}/rootfs-$1"
}

# packages: the package list, comments and blank lines removed.
packages() {
	sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$(dirname "${BASH_SOURCE[0]}")/packages.txt" | tr -s ' \n' ' '
}

# host_mirror: the Debian archive URI from the host's own apt configuration.
host_mirror() {
	local uri=""
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		# deb822: take the URIs of the stanza whose Suites are not a -security suite.
		uri=$(awk '
			/^[[:space:]]*$/ { if (u != "" && s !~ /security/ && t ~ /deb/) { print u; exit } u=""; s=""; t="" ; next }
			/^URIs:/   { u=$2 }
			/^Suites:/ { s=$0 }
			/^Types:/  { t=$0 }
			END { if (u != "" && s !~ /security/ && t ~ /deb/) print u }
		' /etc/apt/sources.list.d/*.sources | grep -v -- '-security' | head -n1)
	fi
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1=="deb" && $0 !~ /security/ { for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
	fi
	[ -n "$uri" ] || die "no Debian mirror found in /etc/apt (set UCX_MIRROR)"
	echo "$uri"
}

# The hardware kit's shared steps (ci/hw-host.sh, ci/hw-dpu.sh).
hw_fail() { echo "FAIL $1: $2"; exit 1; }
hw_pass() { echo "PASS $1: $2"; }

# hw_prepare PROGRAM WHY: build the doctor and PROGRAM, check the sealing
# secret file ($key, at least 16 bytes), and that the doctor finds an
# export-capable memory domain (WHY is the failure message, which says what
# its absence means here).
hw_prepare() {
	local prog=$1 why=$2 p report
	mkdir -p bin
	for p in doctor "$prog"; do
		go build -o "bin/$p" "./examples/$p" || hw_fail build "go build ./examples/$p (needs a supported UCX installed: see README)"
	done
	[ -f "$key" ] && [ "$(wc -c <"$key")" -ge 16 ] ||
		hw_fail key "no sealing secret of at least 16 bytes in $key (the same file on host and DPU; HW_KEY_FILE names another)"
	report=$(bin/doctor -json) || hw_fail doctor "doctor failed: $report"
	if grep -q '"export_capable": 0' <<<"$report"; then
		bin/doctor >&2
		hw_fail doctor "$why"
	fi
	hw_pass doctor "$(grep -c '"can_export": true' <<<"$report") memory domain(s) can export"
}

# host_ip: this machine's first IPv4 address on an interface that is up,
# not a loopback (as testproc.HostIP); 127.0.0.1 without one. share's data
# path binds UCX to the control connection's device, and UCX 1.20 cannot
# carry tcp between processes over a loopback device.
host_ip() {
	local a
	a=$(ip -4 -o addr show scope global up 2>/dev/null | awk '{ split($4, x, "/"); print x[1]; exit }')
	echo "${a:-127.0.0.1}"
}

# dev_of IP: the network interface holding address IP ("" when none).
dev_of() {
	ip -4 -o addr show 2>/dev/null | awk -v a="$1" '{ split($4, x, "/"); if (x[1] == a) { print $2; exit } }'
}
