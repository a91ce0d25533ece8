#!/usr/bin/env bash
# bench/run.sh: Go benchmarks and their C twin, alternately (A B A B ...),
# PAIRS pairs of ITERS operations each; prints medians and Go/C ratios, and
# for the two-process latency rows UCX's own ucx_perftest as an anchor;
# then package share's pipelined 64 MiB transfers beside the same transfer
# in raw ucp calls (Go) and in the C twin, with their ratios.
# BENCH_JSON=FILE also writes the table as JSON. Runs where UCX is (ci/run.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pairs=${BENCH_PAIRS:-5}
iters=${BENCH_ITERS:-20000}
# Every program run is bounded: a hang fails the run instead of stalling CI.
limit=${BENCH_TIMEOUT:-600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p bin
go test -c -o bin/bench.test ./bench
go build -o bin/idle ./bench/idle
gcc -O2 -Wall -o bin/twin bench/ctwin/twin.c $(pkg-config --cflags --libs ucx ucx-uct) -lpthread

# Short operations run ITERS times; transfers and gets (which wait for the
# target's worker) ITERS/20 times; the two-process round trips ITERS/10.
fast='Register64K Register4M Alloc64K RkeyPack RkeyUnpack ExportAttempt ZeroExportImport UCTRegisterPack Put8Flush ProgressIdle Crossing'
slow='Get8 Put64K Put1M Put4M Get64K Get1M Get4M'
twoproc='AMPingPong8Shm AMPingPong8TCP Put8FlushShm Put8FlushTCP Get8Shm Get8TCP'
slow_iters=$(( iters / 20 > 10 ? iters / 20 : 10 ))
pair_iters=$(( iters / 10 > 10 ? iters / 10 : 10 ))
# Pipelined transfers of 64 MiB over tcp (share_test.go and the twin's
# --region-peer), ITERS/1000 of them per row and round, at least 2: the
# share row (Region.ReadAt/WriteAt) and the raw row (ucp gets or puts on a
# RemoteRegion) from the Go benchmark, the C row from the twin.
share_rows='ShareRead64M ShareWrite64M'
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
			pin=$pin_client BENCH_PEER_CPU=${pin_server:+1} BENCH_SHARE_CHUNK=$share_chunk BENCH_SHARE_DEPTH=$share_depth \
				twin "$share_iters" $share_rows >"$work/sc.$p"
		fi
	done
done

# Bytes per operation of the bandwidth benchmarks.
size() { case $1 in *64K) echo 65536 ;; *1M) echo 1048576 ;; *4M) echo 4194304 ;; *) echo 0 ;; esac; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2] + v[NR/2+1]) / 2 }'; }

{
	printf '%-16s %14s %14s %12s %12s %8s %10s\n' operation perftest "(p50)" "C" "Go" "Go/C" "allocs/op"
	json="["
	notes=""
	for name in $(awk '{print $1}' "$work/go.1"); do
		g=$(cat "$work"/go.* | awk -v n="$name" '$1 == n {print $2}' | median)
		c=$(cat "$work"/c.* | awk -v n="$name" '$1 == n {print $2}' | median)
		a=$(awk -v n="$name" '$1 == n {print $3}' "$work/go.1")
		bytes=$(size "$name")
		case $name in Put64K|Put1M|Put4M|Get64K|Get1M|Get4M) bw=1 ;; *) bw=0 ;; esac
		if [ "$bw" = 1 ]; then
			gv=$(awk -v b="$bytes" -v t="$g" 'BEGIN { printf "%.2f", b / t }')
			cv=$(awk -v b="$bytes" -v t="$c" 'BEGIN { printf "%.2f", b / t }')
			ratio=$(awk -v x="$gv" -v y="$cv" 'BEGIN { printf "%.2f", x / y }')
			printf '%-16s %14s %14s %7s GB/s %7s GB/s %6s %10s\n' "$name" - - "$cv" "$gv" "$ratio" "$a"
			json="$json{\"op\":\"$name\",\"c_gbps\":$cv,\"go_gbps\":$gv,\"ratio\":$ratio,\"allocs\":$a},"
			continue
		fi
		ratio=$(awk -v x="$g" -v y="$c" 'BEGIN { printf "%.2f", x / y }')
		pt=- p50=- ptjson=""
		if grep -q "^$name " <<<"$anchors"; then
			read -r _ test tls _ < <(grep "^$name " <<<"$anchors")
			ok=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 != "fail"' | wc -l)
			if [ "$ok" -gt 0 ]; then
				pt=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 != "fail" {print $2}' | median)
				p50=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 != "fail" {print $3}' | median)
				ptjson=",\"perftest_ns\":$pt,\"perftest_p50_ns\":$p50"
				pt="$pt ns" p50="$p50 ns"
			else
				pt=fail
				why=$(cat "$work"/pt.* | awk -v n="$name" '$1 == n && $2 == "fail" { $1 = ""; $2 = ""; sub(/^ +/, ""); print; exit }')
				notes="$notes  perftest $name: $why"$'\n'
				ptjson=",\"perftest_error\":\"$(sed 's/[\\"]/\\&/g' <<<"$why")\""
			fi
			ptjson="$ptjson,\"perftest_test\":\"$test\",\"tls\":\"$tls\""
		fi
		printf '%-16s %14s %14s %9s ns %9s ns %6s %10s\n' "$name" "$pt" "$p50" "$c" "$g" "$ratio" "$a"
		json="$json{\"op\":\"$name\",\"c_ns\":$c,\"go_ns\":$g,\"ratio\":$ratio,\"allocs\":$a$ptjson},"
	done
	printf '%s' "$notes"
	echo "($pairs pairs, $iters operations each ($slow_iters for transfers and gets, $pair_iters for two-process rows), medians; UCX $(pkg-config --modversion ucx); ratios: Go/C for ns, Go/C for GB/s; perftest: ucx_perftest's mean (and median) as a round trip for the ping-pong tests, per get for ucp_get)"

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
		rounds=$(awk '{ printf "%s[%s,%s,%s]", (NR > 1 ? "," : ""), $1, $2, $3 }' "$work/sr.$name")
		sa=$(awk -v n="$name/share" '$1 == n {print $3}' "$work/sgo.1")
		ra=$(awk -v n="$name/raw" '$1 == n {print $3}' "$work/sgo.1")
		read -r sh rw c sr rc sc < <(awk -v s="$sh" -v r="$rw" -v c="$c" -v sr="$sr" -v rc="$rc" -v sc="$sc" \
			'BEGIN { printf "%.0f %.0f %.0f %.2f %.2f %.2f\n", s, r, c, sr, rc, sc }')
		awk -v n="$name" -v s="$sh" -v r="$rw" -v c="$c" -v sr="$sr" -v rc="$rc" -v sc="$sc" -v a="$sa / $ra" -v b=$((64 << 20)) 'BEGIN {
			printf "%-16s %9.2f ms %9.2f ms %9.2f ms %10s %8s %8s %11s\n", n, s / 1e6, r / 1e6, c / 1e6, sr, rc, sc, a
			printf "%-16s %7.2f GB/s %7.2f GB/s %7.2f GB/s\n", "", b / s, b / r, b / c }'
		json="$json{\"op\":\"$name\",\"share_ns\":$sh,\"raw_ns\":$rw,\"c_ns\":$c,\"share_raw\":$sr,\"raw_c\":$rc,\"share_c\":$sc,\"share_allocs\":$sa,\"raw_allocs\":$ra,\"rounds_ns\":[$rounds],\"chunk\":$share_chunk,\"depth\":$share_depth,\"tls\":\"tcp\"},"
	done
	echo "($pairs rounds, $share_iters transfers of 64 MiB per row each; times and GB/s: medians over the rounds; ratios: of times, above 1 the first is slower, the median over the rounds of each round's ratio; allocs/op: share / raw; chunk $share_chunk bytes, depth $share_depth, UCX_TLS=tcp)"
	idle=$(timeout "$limit" bin/idle -for "${BENCH_IDLE:-5s}" 2>/dev/null)
	echo "$idle"
	[ -n "${BENCH_JSON:-}" ] && echo "{\"ucx\":\"$(pkg-config --modversion ucx)\",\"ops\":${json%,}],\"idle\":\"$idle\"}" >"$BENCH_JSON"
	true
}
