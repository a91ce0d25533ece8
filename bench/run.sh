#!/usr/bin/env bash
# bench/run.sh: Go benchmarks and their C twin, alternately (A B A B ...),
# PAIRS pairs of ITERS operations each; prints medians and Go/C ratios.
# BENCH_JSON=FILE also writes the table as JSON. Runs where UCX is (ci/run.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pairs=${BENCH_PAIRS:-5}
iters=${BENCH_ITERS:-20000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p bin
go test -c -o bin/bench.test ./bench
go build -o bin/idle ./bench/idle
gcc -O2 -Wall -o bin/twin bench/ctwin/twin.c $(pkg-config --cflags --libs ucx ucx-uct) -lpthread

# Short operations run ITERS times; transfers and gets (which wait for the
# target's worker) ITERS/20 times.
fast='Register64K Register4M Alloc64K RkeyPack ExportAttempt ZeroExportImport UCTRegisterPack Put8Flush ProgressIdle'
slow='Get8 Put64K Put1M Put4M Get64K Get1M Get4M'
slow_iters=$(( iters / 20 > 10 ? iters / 20 : 10 ))
gobench() { # ITERS NAMES...
	local n=$1; shift
	bin/bench.test -test.run '^$' -test.bench "^Benchmark($(echo "$@" | tr ' ' '|'))\$" -test.benchtime "${n}x" -test.benchmem 2>/dev/null |
		awk '/^Benchmark/ { sub(/^Benchmark/, "", $1); sub(/-[0-9]+$/, "", $1); a = "-"; for (i = 1; i <= NF; i++) if ($i == "allocs/op") a = $(i-1); print $1, $3, a }'
}
for p in $(seq "$pairs"); do
	{ gobench "$iters" $fast; gobench "$slow_iters" $slow; } >"$work/go.$p"
	{ bin/twin "$iters" $fast; bin/twin "$slow_iters" $slow; } 2>/dev/null >"$work/c.$p"
done

# Bytes per operation of the bandwidth benchmarks.
size() { case $1 in *64K) echo 65536 ;; *1M) echo 1048576 ;; *4M) echo 4194304 ;; *) echo 0 ;; esac; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2] + v[NR/2+1]) / 2 }'; }

{
	printf '%-18s %12s %12s %8s %10s\n' operation "C" "Go" "Go/C" "allocs/op"
	json="["
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
			printf '%-18s %9s GB/s %6s GB/s %6s %10s\n' "$name" "$cv" "$gv" "$ratio" "$a"
			json="$json{\"op\":\"$name\",\"c_gbps\":$cv,\"go_gbps\":$gv,\"ratio\":$ratio,\"allocs\":$a},"
		else
			ratio=$(awk -v x="$g" -v y="$c" 'BEGIN { printf "%.2f", x / y }')
			printf '%-18s %9s ns %9s ns %6s %10s\n' "$name" "$c" "$g" "$ratio" "$a"
			json="$json{\"op\":\"$name\",\"c_ns\":$c,\"go_ns\":$g,\"ratio\":$ratio,\"allocs\":$a},"
		fi
	done
	echo "($pairs pairs, $iters operations each ($slow_iters for transfers and gets), medians; UCX $(pkg-config --modversion ucx); ratios: Go/C for ns, Go/C for GB/s)"
	idle=$(bin/idle -for "${BENCH_IDLE:-5s}" 2>/dev/null)
	echo "$idle"
	[ -n "${BENCH_JSON:-}" ] && echo "{\"ucx\":\"$(pkg-config --modversion ucx)\",\"ops\":${json%,}],\"idle\":\"$idle\"}" >"$BENCH_JSON"
	true
}
