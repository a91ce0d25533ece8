#!/usr/bin/env bash
# bench/run.sh: Go benchmarks and their C twin, alternately (A B A B ...),
# PAIRS pairs of ITERS operations each; prints medians and Go/C ratios, and
# for the two-process latency rows UCX's own ucx_perftest as an anchor;
# then package share's pipelined 64 MiB transfers beside the same transfer
# in raw ucp calls (Go) and in the C twin, with their ratios; then the
# rows whose ratio got worse than bench/baseline.json's by more than the
# run-to-run spread (printed, never a failure). BENCH_JSON=FILE also writes
# the run as JSON (bench/README.md: the keys); BENCH_BASELINE=update
# writes it to the baseline instead of comparing, BENCH_BASELINE=off skips
# the comparison, BENCH_BASELINE_FILE=FILE names another baseline. Runs
# where UCX is (ci/run.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The files the user names are taken from where this script was started.
here=$PWD
userpath() { # VAR: VAR's value made absolute; its directory must exist
	local v=${!1}
	case $v in /*) ;; *) v=$here/$v ;; esac
	[ -d "$(dirname "$v")" ] || { echo "bench: $1=${!1}: no directory $(dirname "$v")" >&2; exit 1; }
	printf '%s' "$v"
}
[ -z "${BENCH_JSON:-}" ] || BENCH_JSON=$(userpath BENCH_JSON)
baseline_mode=${BENCH_BASELINE:-compare}
case $baseline_mode in compare|update|off) ;; *) echo "bench: BENCH_BASELINE=$baseline_mode: want update or off (or nothing: compare)" >&2; exit 1 ;; esac
if [ -n "${BENCH_BASELINE_FILE:-}" ]; then
	baseline=$(userpath BENCH_BASELINE_FILE) baseline_name=$BENCH_BASELINE_FILE
	[ "$baseline_mode" != compare ] || [ -f "$baseline" ] || { echo "bench: BENCH_BASELINE_FILE=$BENCH_BASELINE_FILE: no such file" >&2; exit 1; }
else
	baseline=$root/bench/baseline.json baseline_name=bench/baseline.json
fi
cd "$root"
pairs=${BENCH_PAIRS:-5}
iters=${BENCH_ITERS:-20000}
# Every program run is bounded: a hang fails the run instead of stalling CI.
limit=${BENCH_TIMEOUT:-600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# jsonawk -v mode=check -v file=F: fails (exit 1, the reason on stderr)
# unless F is a JSON document in the layout this script writes (the keys
# the comparison reads). jsonawk -v mode=compare -v base=F -v run=F -v
# name=NAME: prints the comparison of run F with baseline F (bench/README.md).
# The root filesystem has neither jq nor python3; this is a small JSON
# parser in POSIX awk (mawk there), every value stored under its path:
# P.rows[0].op.
jsonawk() {
	awk "$@" '
	function fail(msg) { printf "bench: %s: %s\n", cur, msg > "/dev/stderr"; exit 1 }
	function at(   t) { t = substr(S, 1, pos); return "line " (gsub(/\n/, "", t) + 1) }
	function peek() { while (pos <= n && index(" \t\r\n", substr(S, pos, 1)) > 0) pos++; return substr(S, pos, 1) }
	function str(   out, c, e) {
		out = ""
		for (pos++; ; ) {
			if (pos > n) fail("a string without its closing quote")
			c = substr(S, pos, 1)
			if (c == "\"") { pos++; return out }
			if (c == "\\") {
				e = substr(S, pos + 1, 1)
				if (e == "u" && substr(S, pos + 2, 4) ~ /^[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]$/) { out = out "?"; pos += 6; continue }
				if (e == "" || index("\"\\/bfnrt", e) == 0) fail("a bad escape in a string, " at())
				out = out (index("\"\\/", e) ? e : " "); pos += 2; continue
			}
			out = out c; pos++
		}
	}
	function value(path,   c, k, i) {
		c = peek()
		if (c == "{") {
			pos++; T[path] = "object"
			if (peek() == "}") { pos++; return }
			for (;;) {
				if (peek() != "\"") fail("a key expected, " at())
				k = str()
				if ((path "." k) in T) fail("the key \"" k "\" twice in one object, " at())
				if (peek() != ":") fail("a colon expected, " at())
				pos++
				value(path "." k)
				c = peek(); pos++
				if (c == "}") return
				if (c != ",") fail("a comma or } expected, " at())
			}
		}
		if (c == "[") {
			pos++; T[path] = "array"; N[path] = 0
			if (peek() == "]") { pos++; return }
			for (i = 0; ; i++) {
				value(path "[" i "]"); N[path] = i + 1
				c = peek(); pos++
				if (c == "]") return
				if (c != ",") fail("a comma or ] expected, " at())
			}
		}
		if (c == "\"") { V[path] = str(); T[path] = "string"; return }
		if (match(substr(S, pos, 40), /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
			V[path] = substr(S, pos, RLENGTH) + 0; T[path] = "number"; pos += RLENGTH; return
		}
		if (substr(S, pos, 4) == "null") { T[path] = "null"; pos += 4; return }
		if (substr(S, pos, 4) == "true") { T[path] = "bool"; V[path] = 1; pos += 4; return }
		if (substr(S, pos, 5) == "false") { T[path] = "bool"; V[path] = 0; pos += 5; return }
		fail((c == "" ? "the end of the file" : "\"" c "\"") " where a value belongs, " at())
	}
	function want(path, type, what) {
		if (!(path in T)) fail(what " is missing")
		if (T[path] != type) fail(what " is a " T[path] ", not a " type)
	}
	# load FILE P: parses FILE under the prefix P and checks what is read.
	function load(file, P,   line, i, r, u) {
		cur = file; S = ""; pos = 1
		while ((getline line < file) > 0) S = S line "\n"
		close(file)
		n = length(S)
		if (peek() == "") fail("empty")
		value(P)
		if (peek() != "") fail("text after the document, " at())
		want(P, "object", "the document")
		want(P ".ucx", "string", "\"ucx\"")
		want(P ".date", "string", "\"date\"")
		want(P ".machine", "object", "\"machine\"")
		want(P ".machine.cpu", "string", "\"machine\".\"cpu\"")
		want(P ".machine.nproc", "number", "\"machine\".\"nproc\"")
		want(P ".pairs", "number", "\"pairs\"")
		want(P ".iters", "number", "\"iters\"")
		want(P ".rows", "array", "\"rows\"")
		if (N[P ".rows"] == 0) fail("no rows")
		for (i = 0; i < N[P ".rows"]; i++) {
			r = P ".rows[" i "]"
			want(r, "object", "row " i + 1)
			want(r ".op", "string", "\"op\" of row " i + 1)
			u = V[r ".unit"]
			if (T[r ".unit"] != "string" || (u != "ns" && u != "GB/s" && u != "ms"))
				fail("row " V[r ".op"] ": \"unit\" is not \"ns\", \"GB/s\" or \"ms\"")
			if (!((r ".ratio") in T) || T[r ".ratio"] != "null") want(r ".ratio", "number", "\"ratio\" of row " V[r ".op"])
			if (T[r ".ratio"] == "number" && V[r ".ratio"] <= 0) fail("row " V[r ".op"] ": \"ratio\" is not above 0")
			if (!((r ".spread") in T) || T[r ".spread"] != "null") want(r ".spread", "number", "\"spread\" of row " V[r ".op"])
			if ((P SUBSEP V[r ".op"]) in ROW) fail("row " V[r ".op"] " twice")
			ROW[P, V[r ".op"]] = r
		}
	}
	function pct(x) { return sprintf("%.0f %%", 100 * x) }
	BEGIN {
		if (mode == "check") { load(file, "B"); exit 0 }
		load(base, "B"); load(run, "R")
		if (V["B.ucx"] != V["R.ucx"]) {
			printf "%s is for UCX %s, this run is UCX %s: not compared\n", name, V["B.ucx"], V["R.ucx"]
			exit 0
		}
		head = sprintf("%s (UCX %s, %s, %d x %s)", name, V["B.ucx"], V["B.date"], V["B.machine.nproc"], V["B.machine.cpu"])
		if (V["B.pairs"] != V["R.pairs"] || V["B.iters"] != V["R.iters"])
			printf "(the baseline has %d pair(s) of %d operations, this run %d of %d: ratios of shorter runs move more)\n", V["B.pairs"], V["B.iters"], V["R.pairs"], V["R.iters"]
		worse = 0; missing = ""
		for (i = 0; i < N["R.rows"]; i++) {
			r = "R.rows[" i "]"; op = V[r ".op"]; u = V[r ".unit"]
			if (!(("B" SUBSEP op) in ROW)) { missing = missing " " op; continue }
			b = ROW["B", op]
			if (V[b ".unit"] != u) { missing = missing " " op "(unit " V[b ".unit"] ")"; continue }
			if (T[r ".ratio"] == "null" || T[b ".ratio"] == "null") { missing = missing " " op "(no ratio)"; continue }
			x = V[r ".ratio"]; y = V[b ".ratio"]
			# Worse: a higher ratio of times, a lower ratio of GB/s; by
			# more than the larger spread, both relative to the ratio.
			d = (u == "GB/s") ? (y - x) / y : (x - y) / y
			rs = T[r ".spread"] == "null" ? 0 : V[r ".spread"]
			bs = T[b ".spread"] == "null" ? 0 : V[b ".spread"]
			allowed = rs > bs ? rs : bs
			if (d <= allowed) continue
			if (worse++ == 0) {
				printf "worse than %s:\n", head
				printf "  %-20s %5s %9s %9s %7s %17s\n", "row", "unit", "baseline", "this run", "worse", "spread: run / base"
			}
			printf "  %-20s %5s %9.2f %9.2f %7s %8s / %6s\n", op, u, y, x, pct(d), \
				T[r ".spread"] == "null" ? "-" : pct(rs), T[b ".spread"] == "null" ? "-" : pct(bs)
		}
		if (worse == 0) printf "no row worse than the baseline beyond the spread: %s\n", head
		if (missing != "") printf "not compared:%s\n", missing
	}'
}
if [ "$baseline_mode" = compare ] && [ -f "$baseline" ]; then
	jsonawk -v mode=check -v file="$baseline" || { echo "bench: $baseline_name is malformed (BENCH_BASELINE=update writes a new one)" >&2; exit 1; }
fi

mkdir -p bin
go test -c -o bin/bench.test ./bench
go build -o bin/idle ./bench/idle
gcc -O2 -Wall -o bin/twin bench/ctwin/twin.c $(pkg-config --cflags --libs ucx ucx-uct) -lpthread

# Short operations run ITERS times; transfers and gets (which wait for the
# target's worker) ITERS/20 times; the two-process round trips ITERS/10.
fast='Register64K Register4M Alloc64K RkeyPack RkeyUnpack ExportAttempt ZeroExportImport UCTRegisterPack Put8Flush FetchAdd8 ProgressIdle Crossing'
slow='Get8 TagPingPong8 Stream64K Put64K Put1M Put4M Get64K Get1M Get4M'
twoproc='AMPingPong8Shm AMPingPong8TCP Put8FlushShm Put8FlushTCP Get8Shm Get8TCP'
slow_iters=$(( iters / 20 > 10 ? iters / 20 : 10 ))
pair_iters=$(( iters / 10 > 10 ? iters / 10 : 10 ))
# Pipelined transfers of 64 MiB over tcp (share_test.go and the twin's
# --region-peer), ITERS/1000 of them per row and round, at least 2: the
# share row (Region.ReadAt/WriteAt) and the raw row (ucp gets or puts on a
# RemoteRegion) from the Go benchmark, the C row from the twin.
share_rows='ShareRead64M ShareWrite64M'
# Both sides over the machine's network address, as the Go rows' exporter
# (testproc.HostIP): share's data path binds UCX to that device.
share_addr=$(. ci/lib.sh && host_ip)
# and UCX bound to its device, as share's data paths and the Go raw rows
# are (with every device, UCX stripes one transfer over lo and the network
# device).
share_dev=$(. ci/lib.sh && dev_of "$share_addr")
share_iters=$(( iters / 1000 > 2 ? iters / 1000 : 2 ))
# The twin moves what share does: share.DefaultChunk bytes per operation,
# share.DefaultDepth in flight, read from package share itself.
share_const() { # NAME: the constant's value, evaluated ("512 << 10")
	local v
	v=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\([0-9][0-9 <]*\)\$/\1/p" share/importer.go)
	v=$(( ${v:-0} ))
	[ "$v" -gt 0 ] || { echo "bench: cannot read share.$1 from share/importer.go" >&2; exit 1; }
	echo "$v"
}
share_chunk=$(share_const DefaultChunk)
share_depth=$(share_const DefaultDepth)
# Two-process rows: the client on core 0 and its peer on core 1 (Go's peer
# under taskset, the C twin's by sched_setaffinity, ucx_perftest's server
# and client alike), where there are two cores (BENCH_PIN=0: no pinning).
# Two busy-polling processes that share cores measure the scheduler.
pin="" pin_client="" pin_server=""
if [ "${BENCH_PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
	pin_client="taskset -c 0" pin_server="taskset -c 1"
fi
gobench() { # ITERS NAMES...
	local n=$1; shift
	timeout "$limit" $pin bin/bench.test -test.run '^$' -test.bench "^Benchmark($(echo "$@" | tr ' ' '|'))\$" -test.benchtime "${n}x" -test.benchmem 2>"$work/go.err" |
		awk '/^Benchmark/ { sub(/^Benchmark/, "", $1); sub(/-[0-9]+$/, "", $1); a = "-"; for (i = 1; i <= NF; i++) if ($i == "allocs/op") a = $(i-1); print $1, $3, a }' ||
		{ echo "bench: Go benchmarks failed:" >&2; cat "$work/go.err" >&2; return 1; }
}
twin() { # ITERS NAMES...
	timeout "$limit" $pin bin/twin "$@" 2>"$work/c.err" || { echo "bench: C twin failed:" >&2; cat "$work/c.err" >&2; return 1; }
}

# ucx_perftest anchors: row, test, UCX_TLS, and the factor that turns the
# figure perftest prints into the row's unit (its latency tests print half a
# round trip; its get prints one get).
anchors='AMPingPong8Shm ucp_am_lat posix,sysv,self 2
AMPingPong8TCP ucp_am_lat tcp 2
Put8FlushShm ucp_put_lat posix,sysv,self 2
Put8FlushTCP ucp_put_lat tcp 2
Get8Shm ucp_get posix,sysv,self 1
Get8TCP ucp_get tcp 1'
pt_limit=${BENCH_PERFTEST_TIMEOUT:-60}
# Debian's ucx_perftest is linked with Open MPI, which initializes even with
# -P 0: without its shared-memory transport and UCX layer it leaves no
# segment in /dev/shm, creates no second UCX context, and starts in 0.4 s
# instead of 1.5 s (it sleeps a second).
export OMPI_MCA_btl=self OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx

# perftest ROW TEST TLS FACTOR: one ucx_perftest run over loopback, server in
# the background; prints "ROW MEAN_NS P50_NS", or "ROW fail REASON" (a
# failure is reported in the table, it does not end the bench).
perftest() {
	local row=$1 test=$2 tls=$3 factor=$4 port srv out="" rc try i line
	if ! command -v ucx_perftest >/dev/null; then
		echo "$row fail ucx_perftest not installed (package ucx-utils)"; return
	fi
	for try in 1 2 3; do
		port=$(( 20000 + RANDOM % 40000 ))
		UCX_TLS=$tls timeout "$((pt_limit + 10))" $pin_server ucx_perftest -P 0 -p "$port" </dev/null >"$work/pt.srv" 2>&1 &
		srv=$!
		rc=refused
		for i in $(seq 50); do # the client does not retry: retry until the server listens
			sleep 0.1
			kill -0 "$srv" 2>/dev/null || { rc=noserver; break; }
			rc=0
			out=$(UCX_TLS=$tls timeout "$pt_limit" $pin_client ucx_perftest 127.0.0.1 -P 0 -p "$port" -M serialized \
				-t "$test" -s 8 -n "$pair_iters" -w "$(( pair_iters / 10 > 10 ? pair_iters / 10 : 10 ))" -f </dev/null 2>&1) || rc=$?
			[ "$rc" != 0 ] && grep -q 'Connection refused' <<<"$out" && { rc=refused; continue; }
			break
		done
		# The server ends with the test; its result is the client's.
		for i in $(seq 30); do kill -0 "$srv" 2>/dev/null && sleep 0.1; done
		kill "$srv" 2>/dev/null || true
		wait "$srv" 2>/dev/null || true
		case $rc in
		refused|noserver) out="server did not start on port $port: $(tail -n1 "$work/pt.srv")" ;;
		124) out="timed out after ${pt_limit}s"; break ;;
		*) break ;;
		esac
	done
	# The final line: iterations, latency 50%ile, average, overall (us), ...
	line=$(awk -v n="$pair_iters" 'NF >= 4 && $1 == n && $2 ~ /^[0-9.]+$/ { l = $0 } END { print l }' <<<"$out")
	if [ "$rc" != 0 ] || [ -z "$line" ]; then
		# The reason: UCX's first error line, else perftest's last words.
		line=$(grep -m1 ' ERROR ' <<<"$out" || grep -v '^[+|]' <<<"$out" | tail -n1)
		echo "$row fail $test UCX_TLS=$tls: $(sed 's/^\[[^]]*\] *\[[^]]*\] *//' <<<"$line" | tr -s ' ')"
		return
	fi
	awk -v row="$row" -v f="$factor" '{ printf "%s %.1f %.1f\n", row, $4 * 1000 * f, $2 * 1000 * f }' <<<"$line"
}

loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)
for p in $(seq "$pairs"); do
	{ gobench "$iters" $fast; gobench "$slow_iters" $slow; } >"$work/go.$p"
	{ pin=$pin_client BENCH_PEER_CPU=${pin_server:+1} gobench "$pair_iters" $twoproc; } >>"$work/go.$p"
	{ twin "$iters" $fast; twin "$slow_iters" $slow; } >"$work/c.$p"
	{ pin=$pin_client BENCH_PEER_CPU=${pin_server:+1} twin "$pair_iters" $twoproc; } >>"$work/c.$p"
	while read -r row test tls factor; do perftest "$row" "$test" "$tls" "$factor"; done <<<"$anchors" >"$work/pt.$p"
	# The transfers: Go (share, then raw, one peer) and C, in turn; which
	# side goes first alternates between rounds.
	for side in $( (( p % 2 )) && echo go c || echo c go); do
		if [ "$side" = go ]; then
			pin=$pin_client BENCH_PEER_CPU=${pin_server:+1} gobench "$share_iters" $share_rows >"$work/sgo.$p"
		else
			pin=$pin_client BENCH_PEER_CPU=${pin_server:+1} BENCH_SHARE_CHUNK=$share_chunk BENCH_SHARE_DEPTH=$share_depth BENCH_SHARE_ADDR=$share_addr UCX_NET_DEVICES=${share_dev:-all} \
				twin "$share_iters" $share_rows >"$work/sc.$p"
		fi
	done
done

# Bytes per operation of the bandwidth benchmarks.
size() { case $1 in *64K) echo 65536 ;; *1M) echo 1048576 ;; *4M) echo 4194304 ;; *) echo 0 ;; esac; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2] + v[NR/2+1]) / 2 }'; }
# The run-to-run spread of a row: each pair (or round) gives its own ratio
# of Go to C; the spread is (largest - smallest) / median of those ratios,
# so 0.10 means the pairs' ratios lay within 10 % of the ratio's size.
# One pair has no spread: null.
spread() { sort -g | awk '{ v[NR] = $1 } END { if (NR < 2) { print "null"; exit } m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; if (m > 0) printf "%.3f\n", (v[NR] - v[1]) / m; else print "null" }'; }
# ratio X Y: X / Y as the table and the JSON give it: two decimals, two
# significant digits below 0.1; null where either is not above 0.
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { if (x <= 0 || y <= 0) print "null"; else if (x / y >= 0.1) printf "%.2f\n", x / y; else printf "%.2g\n", x / y }'; }
# pairs_of NAME: one line per pair, "GO_NS C_NS".
pairs_of() {
	local p
	for p in $(seq "$pairs"); do
		echo "$(awk -v n="$1" '$1 == n { print $2 }' "$work/go.$p") $(awk -v n="$1" '$1 == n { print $2 }' "$work/c.$p")"
	done
}
jstr() { printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"; }
pct() { [ "$1" = null ] && echo - || awk -v x="$1" 'BEGIN { printf "%.0f %%\n", 100 * x }'; }
ucx=$(pkg-config --modversion ucx)
# The rows of the JSON, one object a line: op unit c go ratio
# over_c_crossings allocs spread, and the perftest keys for the anchors.
: >"$work/rows"
row() { # OP UNIT C GO RATIO OVER ALLOCS SPREAD [EXTRA]
	echo "{\"op\": \"$1\", \"unit\": \"$2\", \"c\": $3, \"go\": $4, \"ratio\": $5, \"over_c_crossings\": $6, \"allocs\": $7, \"spread\": $8${9:-}}" >>"$work/rows"
}
# Commit of the tree measured: git's short hash, else read from .git (the
# root filesystem has no git); null if neither.
commit() {
	local gd=$root/.git head ref
	if command -v git >/dev/null && head=$(git -C "$root" -c safe.directory="$root" rev-parse --short HEAD 2>/dev/null); then
		jstr "$head"; return
	fi
	[ -f "$gd" ] && { gd=$(sed -n 's/^gitdir: //p' "$gd"); case $gd in /*) ;; *) gd=$root/$gd ;; esac; }
	head=$(cat "$gd/HEAD" 2>/dev/null) || { echo null; return; }
	if [ "${head#ref: }" != "$head" ]; then
		ref=${head#ref: }
		[ -f "$gd/commondir" ] && [ ! -f "$gd/$ref" ] && gd=$gd/$(cat "$gd/commondir")
		head=$(cat "$gd/$ref" 2>/dev/null || awk -v r="$ref" '$2 == r { print $1 }' "$gd/packed-refs" 2>/dev/null || true)
	fi
	case $head in [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]*) jstr "$(cut -c1-7 <<<"$head")" ;; *) echo null ;; esac
}

{
	# The Go Crossing row (one empty cgo call): the unit of "over C".
	crossing=$(cat "$work"/go.* | awk '$1 == "Crossing" { print $2 }' | median)
	printf '%-16s %14s %14s %12s %12s %6s %18s %10s %7s\n' operation perftest "(p50)" "C" "Go" "Go/C" "over C (crossings)" "allocs/op" spread
	notes=""
	for name in $(awk '{print $1}' "$work/go.1"); do
		pairs_of "$name" >"$work/pairs"
		g=$(awk '{ print $1 }' "$work/pairs" | median)
		c=$(awk '{ print $2 }' "$work/pairs" | median)
		a=$(awk -v n="$name" '$1 == n {print $3}' "$work/go.1")
		[ "$a" = - ] && a=null
		bytes=$(size "$name")
		case $name in Put64K|Put1M|Put4M|Get64K|Get1M|Get4M) bw=1 ;; *) bw=0 ;; esac
		if [ "$bw" = 1 ]; then
			# Ratio of GB/s: C's time over Go's, per pair.
			sp=$(awk '$1 > 0 && $2 > 0 { print $2 / $1 }' "$work/pairs" | spread)
			gv=$(awk -v b="$bytes" -v t="$g" 'BEGIN { printf "%.2f", b / t }')
			cv=$(awk -v b="$bytes" -v t="$c" 'BEGIN { printf "%.2f", b / t }')
			ratio=$(ratio "$c" "$g") # from the times, not the rounded GB/s
			printf '%-16s %14s %14s %7s GB/s %7s GB/s %6s %18s %10s %7s\n' "$name" - - "$cv" "$gv" "${ratio/null/-}" - "${a/null/-}" "$(pct "$sp")"
			row "$name" GB/s "$cv" "$gv" "$ratio" null "$a" "$sp"
			continue
		fi
		sp=$(awk '$1 > 0 && $2 > 0 { print $1 / $2 }' "$work/pairs" | spread)
		ratio=$(ratio "$g" "$c")
		over=$(awk -v x="$g" -v y="$c" -v z="$crossing" 'BEGIN { if (z + 0 > 0) printf "%.1f", (x - y) / z; else print "null" }')
		pt=- p50=- ptjson=""
		if grep -q "^$name " <<<"$anchors"; then
			read -r _ test tls _ < <(grep "^$name " <<<"$anchors")
			ok=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 != "fail"' | wc -l)
			if [ "$ok" -gt 0 ]; then
				pt=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 != "fail" {print $2}' | median)
				p50=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 != "fail" {print $3}' | median)
				ptjson=", \"perftest_ns\": $pt, \"perftest_p50_ns\": $p50"
				pt="$pt ns" p50="$p50 ns"
			else
				pt=fail
				why=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 == "fail" { $1 = ""; $2 = ""; sub(/^ +/, ""); print; exit }')
				notes="$notes  perftest $name: $why"$'\n'
				ptjson=", \"perftest_error\": $(jstr "$why")"
			fi
			ptjson="$ptjson, \"perftest_test\": \"$test\", \"tls\": \"$tls\""
		fi
		printf '%-16s %14s %14s %9s ns %9s ns %6s %18s %10s %7s\n' "$name" "$pt" "$p50" "$c" "$g" "${ratio/null/-}" "${over/null/-}" "${a/null/-}" "$(pct "$sp")"
		row "$name" ns "$c" "$g" "$ratio" "$over" "$a" "$sp" "$ptjson"
	done
	printf '%s' "$notes"
	echo "($pairs pairs, $iters operations each ($slow_iters for transfers and gets, $pair_iters for two-process rows), medians; UCX $ucx; ratios: Go/C for ns, Go/C for GB/s; over C: (Go - C) / the Go Crossing row's ns; spread: (largest - smallest) / median of the pairs' own ratios; perftest: ucx_perftest's mean (and median) as a round trip for the ping-pong tests, per get for ucp_get)"

	# The transfers: ms per 64 MiB (medians over the rounds), the ratios of
	# the times within each round (medians over the rounds: the load of a
	# shared machine changes between rounds more than within one), GB/s.
	printf '\n%-16s %12s %12s %12s %10s %8s %8s %11s\n' "64 MiB, tcp" share "raw Go" "C" share/raw raw/C share/C "allocs/op"
	for name in $share_rows; do
		for p in $(seq "$pairs"); do
			awk -v n="$name" '$1 == n "/share" { s = $2 } $1 == n "/raw" { r = $2 } END { print s, r }' "$work/sgo.$p"
			awk -v n="$name" '$1 == n { print $2 }' "$work/sc.$p"
		done | paste - - >"$work/sr.$name" # per round: share raw C
		sh=$(awk '{ print $1 }' "$work/sr.$name" | median)
		rw=$(awk '{ print $2 }' "$work/sr.$name" | median)
		c=$(awk '{ print $3 }' "$work/sr.$name" | median)
		sr=$(awk '{ print $1 / $2 }' "$work/sr.$name" | median)
		rc=$(awk '{ print $2 / $3 }' "$work/sr.$name" | median)
		sc=$(awk '{ print $1 / $3 }' "$work/sr.$name" | median)
		rc_sp=$(awk '{ print $2 / $3 }' "$work/sr.$name" | spread)
		sc_sp=$(awk '{ print $1 / $3 }' "$work/sr.$name" | spread)
		sa=$(awk -v n="$name/share" '$1 == n {print $3}' "$work/sgo.1")
		ra=$(awk -v n="$name/raw" '$1 == n {print $3}' "$work/sgo.1")
		read -r sh rw c sr rc sc < <(awk -v s="$sh" -v r="$rw" -v c="$c" -v sr="$sr" -v rc="$rc" -v sc="$sc" \
			'BEGIN { printf "%.0f %.0f %.0f %.2f %.2f %.2f\n", s, r, c, sr, rc, sc }')
		awk -v n="$name" -v s="$sh" -v r="$rw" -v c="$c" -v sr="$sr" -v rc="$rc" -v sc="$sc" -v a="$sa / $ra" -v b=$((64 << 20)) 'BEGIN {
			printf "%-16s %9.2f ms %9.2f ms %9.2f ms %10s %8s %8s %11s\n", n, s / 1e6, r / 1e6, c / 1e6, sr, rc, sc, a
			printf "%-16s %7.2f GB/s %7.2f GB/s %7.2f GB/s\n", "", b / s, b / r, b / c }'
		read -r shm rwm cm < <(awk -v s="$sh" -v r="$rw" -v c="$c" 'BEGIN { printf "%.2f %.2f %.2f\n", s / 1e6, r / 1e6, c / 1e6 }')
		[ "$sa" = - ] && sa=null
		[ "$ra" = - ] && ra=null
		row "$name" ms "$cm" "$shm" "$sc" null "${sa:-null}" "$sc_sp"
		row "$name/raw" ms "$cm" "$rwm" "$rc" null "${ra:-null}" "$rc_sp"
	done
	echo "($pairs rounds, $share_iters transfers of 64 MiB per row each; times and GB/s: medians over the rounds; ratios: of times, above 1 the first is slower, the median over the rounds of each round's ratio; allocs/op: share / raw; chunk $share_chunk bytes, depth $share_depth, UCX_TLS=tcp)"
	idle=$(timeout "$limit" bin/idle -for "${BENCH_IDLE:-5s}" 2>/dev/null)
	echo "$idle"

	# The run as JSON (bench/README.md), read back by the check before it
	# is written anywhere or compared.
	{
		echo "{"
		echo "  \"ucx\": $(jstr "$ucx"),"
		echo "  \"date\": \"$(date +%F)\","
		echo "  \"commit\": $(commit),"
		echo "  \"machine\": {\"nproc\": $(nproc), \"cpu\": $(jstr "$(awk -F': *' '$1 ~ /^model name/ { print $2; exit }' /proc/cpuinfo)"), \"loadavg_start\": \"$loadavg_start\", \"loadavg_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"},"
		echo "  \"pairs\": $pairs,"
		echo "  \"iters\": $iters,"
		echo "  \"rows\": ["
		sed '$!s/$/,/; s/^/    /' "$work/rows"
		echo "  ],"
		echo "  \"idle\": $(jstr "$idle")"
		echo "}"
	} >"$work/run.json"
	jsonawk -v mode=check -v file="$work/run.json" || { echo "bench: the run's own JSON is malformed (a bug in bench/run.sh): $work/run.json" >&2; cat "$work/run.json" >&2; exit 1; }
	[ -z "${BENCH_JSON:-}" ] || cp "$work/run.json" "$BENCH_JSON"

	# The regression guard: ratios against the baseline's; a report, never
	# a failure (timings assert nothing).
	echo
	case $baseline_mode in
	update)
		cp "$work/run.json" "$baseline"
		echo "BENCH_BASELINE=update: wrote $baseline_name (not compared)"
		[ "$pairs" -ge 3 ] || echo "  (a short baseline: $pairs pair(s) of $iters operations give noisy ratios, and one pair no spread; make bench measures 5 pairs of 20000)"
		;;
	off) echo "BENCH_BASELINE=off: not compared with $baseline_name" ;;
	compare)
		if [ -f "$baseline" ]; then
			jsonawk -v mode=compare -v base="$baseline" -v run="$work/run.json" -v name="$baseline_name" ||
				{ echo "bench: $baseline_name is malformed (BENCH_BASELINE=update writes a new one)" >&2; exit 1; }
		else
			echo "no baseline to compare with ($baseline_name does not exist; make bench BENCH_BASELINE=update writes one)"
		fi
		;;
	esac
}
