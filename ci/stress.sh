#!/usr/bin/env bash
# ci/stress.sh: the many-round runs that make test leaves out, within about
# STRESS_TIME (a Go duration, default 10m; at least 5m). make test runs each
# repeated test for the fewest rounds that prove its point; here the same
# tests run longer, under -race:
#   1. every one of the 720 close orders, on both transports (about 85 s);
#   2. the lifecycle tests with one random plan per 3 s of the budget (200
#      at 10m: about 95 s under -race) and a tenth as many drop plans per
#      mode, and TestCraftedWorkerAddress 2 rounds (3 from 10m on);
#   3. the soak, 100000 cycles (about 30 s);
#   4. each test that repeats rounds in child processes (the newcomer's
#      first programs, close and connect races) for an equal share of what
#      is left of half the budget (UCXGO_STRESS);
#   5. each fuzz target for an equal share of the rest.
# Each step prints its time. Runs where a supported UCX is (ci/run.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}

seconds() { # a Go duration (90s, 10m, 1h30m) in whole seconds
	local d=$1 total=0 n unit
	while [[ $d =~ ^([0-9]+)(h|m|s)(.*)$ ]]; do
		n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]} d=${BASH_REMATCH[3]}
		case $unit in h) total=$(( total + n * 3600 ));; m) total=$(( total + n * 60 ));; s) total=$(( total + n ));; esac
	done
	[ -z "$d" ] && [ $total -gt 0 ] || { echo "stress: STRESS_TIME=$1: want a duration such as 10m or 1h" >&2; exit 2; }
	echo $total
}
budget=$(seconds "${STRESS_TIME:-10m}")
[ "$budget" -ge 300 ] || { echo "stress: STRESS_TIME=${STRESS_TIME}: at least 5m (the close orders and the soak alone take 2 minutes)" >&2; exit 2; }
start=$(date +%s)
step() { echo; echo "=== stress: $* ($(( $(date +%s) - start )) s of ${budget} s)"; }
# Each run is bounded: a wedged test fails with every goroutine's stack
# (go test's timeout) instead of holding CI.
race=("$GO" test -race -count=1 -timeout "$(( budget + 900 ))s")
# quiet PATTERN CMD...: runs CMD, prints its lines matching PATTERN, or all
# of its output when it fails.
quiet() {
	local pattern=$1 log; shift
	log=$(mktemp)
	if ! "$@" >"$log" 2>&1; then cat "$log"; rm -f "$log"; echo "stress: FAIL: $*"; exit 1; fi
	grep -E "$pattern" "$log" || true
	rm -f "$log"
}

step "1. all 720 close orders, tcp and shared memory"
quiet '^(---|ok)|orders:' env UCXGO_STRESS=1s "${race[@]}" -run '^TestCloseOrders$' -v ./ucp

samples=$(( budget / 3 )) addr_rounds=$(( budget >= 600 ? 3 : 2 ))
step "2. lifecycle plans ($samples random, $(( samples / 10 )) dropped per mode) and crafted worker addresses ($addr_rounds rounds)"
UCXGO_LIFECYCLE_SAMPLES=$samples UCXGO_ADDRESS_ROUNDS=$addr_rounds "${race[@]}" -run '^(TestLifecycleRandom|TestLifecycleDropped|TestLifecycleNamed|TestCraftedWorkerAddress)$' ./ucp

step "3. soak: 100000 cycles"
UCXGO_SOAK_CYCLES=100000 "${race[@]}" -run '^TestSoak$' ./ucp

# The tests whose rounds run in child processes: TestX runs TestXOnce,
# in packages ucp and share.
declare -A rounds
n=0
for p in ucp share; do
	tests=$("$GO" test -race -list '^Test' ./$p | grep '^Test')
	rounds[$p]=$(sed -n 's/^\(Test.*\)Once$/\1/p' <<<"$tests" | grep -Fxf - <(echo "$tests") | tr '\n' ' ')
	[ -n "${rounds[$p]}" ] || { echo "stress: no round tests found in ./$p" >&2; exit 1; }
	n=$(( n + $(wc -w <<<"${rounds[$p]}") ))
done
left=$(( budget - ($(date +%s) - start) ))
share=$(( left / 2 / n ))
[ $share -ge 5 ] || share=5
for p in ucp share; do
	step "4. round tests in child processes of ./$p, ${share} s each: ${rounds[$p]}"
	quiet '^(---|ok)|rounds of' env UCXGO_STRESS=${share}s "${race[@]}" -run "^($(tr ' ' '|' <<<"${rounds[$p]% }"))\$" -v ./$p
done

# The tests that play the peer against share's containment and its
# handshake: three runs, those with rounds taking them for 5 s each.
step "4b. share's containment and handshake: the tests that play the peer, three runs (rounds: 5 s)"
quiet '^(---|ok)' env UCXGO_STRESS=5s "${race[@]}" -count=3 \
	-run '^(TestContained.*|TestOffload.*|TestExporterSurvivesKilledReaders|TestNetworkCutWhileReading|TestImporterKilledMidTransfer|TestRelayRefused|TestImporterRefusesExporterWithoutSecret|TestTLSBindsTheProofs|TestHandshakeFloodBounded|TestHandshakesPerHostBounded|TestSessionsPerHostBounded|TestNoGrantBeforeProof|TestOtherVersionRefusedByVersion|TestBadFramesRefused|TestReviewHostile.*|TestAddDoesNotWaitForAStalledImporter)$' -v ./share

targets=${FUZZ_TARGETS:?the Makefile passes its FUZZ_TARGETS}
n=$(wc -w <<<"$targets")
left=$(( budget - ($(date +%s) - start) ))
share=$(( left / n ))
[ $share -ge 10 ] || share=10
step "5. every fuzz target, ${share} s each"
make --no-print-directory fuzz-native FUZZTIME=${share}s

step "done: close orders, lifecycle, soak, round tests and fuzzing passed"
