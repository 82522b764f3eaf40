#!/usr/bin/env bash
# redis.sh - redis-server with redis-cli and redis-benchmark under the
# preload: plain TCP, both ends under the preload, and each end alone under
# it (mixed: still works, over TCP).  Every run:
#   - redis-cli PING answers PONG; a 256 KiB value set with -x SET comes
#     back byte for byte from GET, and STRLEN agrees;
#   - redis-benchmark -q -n 2000, the default test set, then again with
#     -P 16 (pipelining): it exits 0, prints nothing but its results, has a
#     result line with a positive rate for every test the plain TCP run has
#     (at least the 20 of redis 7), and the server counted exactly the
#     requests it sent (INFO commandstats: 2000 GET, SET, INCR, MSET; 4000
#     PING and LPUSH), so no request was lost or doubled;
#   - the server exits 0 on SHUTDOWN and logged no error.
# The server is our own: a random port, no config file, no persistence, its
# own directory; a system redis is neither used nor touched.
set -u
prog=redis.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli redis-benchmark

head -c 196608 /dev/urandom | base64 -w 0 >"$tmp/value"	# 256 KiB, no newline
reference=""	# the test names of the plain TCP run

# cli MODE ARGS...: redis-cli as the client of a MODE run; output in $out.
cli() {
	local mode=$1
	shift
	client "$mode" 30 redis-cli -h 127.0.0.1 -p "$port" "$@" \
		<"${cli_input:-/dev/null}" >"$tmp/cli.out" 2>"$tmp/cli.err"
	out=$(other_lines "$tmp/cli.out")
	[ $rc = 0 ] || fail "redis-cli $* exited with $rc: $(cat "$tmp/cli.err")"
	no_ferry_errors "redis-cli $* ($(describe "$mode"))" "$tmp/cli.err"
	client_transport "redis-cli $* ($(describe "$mode"))" "$mode" "$tmp/cli.err"
}

# results FILE: the names of the tests redis-benchmark -q reported, one a
# line, in order (its progress lines end in \r, its results in \n; a test
# done within a millisecond reports "inf" requests per second).
results() {
	tr '\r' '\n' <"$1" | sed -n 's/^\(.*\): \([0-9.]*\|inf\) requests per second.*/\1/p'
}

# check_counts WHAT MODE: the server counted the requests of one run.
check_counts() {
	local what=$1 mode=$2 cmd want got
	cli "$mode" INFO commandstats
	for cmd in get:2000 set:2000 incr:2000 mset:2000 ping:4000 lpush:4000; do
		want=${cmd#*:}
		got=$(printf '%s\n' "$out" | tr -d '\r' |
			sed -n "s/^cmdstat_${cmd%%:*}:calls=\([0-9]*\),.*/\1/p")
		[ "$got" = "$want" ] ||
			fail "$what: the server counted ${got:-no} ${cmd%%:*} calls, not $want"
	done
}

# bench WHAT MODE ARGS...: one redis-benchmark run and its checks.
bench() {
	local what=$1 mode=$2 names name failed_before=$failed
	shift 2
	cli "$mode" CONFIG RESETSTAT
	client "$mode" 120 redis-benchmark -h 127.0.0.1 -p "$port" -q -n 2000 "$@" \
		>"$tmp/bench.out" 2>"$tmp/bench.err"
	[ $rc = 0 ] || fail "$what: redis-benchmark exited with $rc"
	if other_lines "$tmp/bench.err" | grep -q .; then
		fail "$what: redis-benchmark complained: $(other_lines "$tmp/bench.err" | head -n 5)"
	fi
	no_ferry_errors "$what, redis-benchmark" "$tmp/bench.err"
	client_transport "$what" "$mode" "$tmp/bench.err"
	if tr '\r' '\n' <"$tmp/bench.out" | grep -Eiq 'error|ERR '; then
		fail "$what: errors in the results: $(tr '\r' '\n' <"$tmp/bench.out" |
			grep -Ei 'error|ERR ' | head -n 5)"
	fi
	names=$(results "$tmp/bench.out")
	if [ "$mode" = tcp ] && [ -z "$reference" ]; then
		reference=$names
		[ "$(printf '%s\n' "$reference" | grep -c .)" -ge 20 ] ||
			fail "$what: only these tests ran over plain TCP: $reference"
	fi
	while IFS= read -r name; do
		[ -n "$name" ] || continue
		printf '%s\n' "$names" | grep -Fxq "$name" ||
			{ fail "$what: no result for $name"; continue; }
		tr '\r' '\n' <"$tmp/bench.out" | awk -v name="$name: " '
			index($0, name) == 1 && / requests per second/ {
				r = substr($0, length(name) + 1)
				rate = r + 0; found = 1; inf = index(r, "inf ") == 1 }
			END { exit !(found && (rate > 0 || inf)) }' ||
			fail "$what: $name: no positive rate"
	done <<<"$reference"
	check_counts "$what" "$mode"
	[ "$failed" != "$failed_before" ] || note "ok: $what: $(printf '%s\n' "$names" | grep -c .) tests"
}

run() {
	local mode=$1 what got failed_before=$failed
	what="redis ($(describe "$mode"))"
	mkdir -p "$tmp/redis-$mode"
	serve "redis-$mode" "$mode" redis-server --port @PORT@ --bind 127.0.0.1 \
		--save '' --appendonly no --protected-mode no --daemonize no \
		--dir "$tmp/redis-$mode" --logfile "$tmp/redis-$mode/log" || return

	cli "$mode" PING
	[ "$out" = PONG ] || fail "$what: PING answered '$out'"
	cli_input=$tmp/value cli "$mode" -x SET ferry:value
	[ "$out" = OK ] || fail "$what: SET answered '$out'"
	cli "$mode" --raw GET ferry:value
	got=$(other_lines "$tmp/cli.out" | sha256sum | cut -d' ' -f1)
	# --raw GET ends the value with a newline.
	[ "$got" = "$( (cat "$tmp/value"; echo) | sha256sum | cut -d' ' -f1)" ] ||
		fail "$what: GET did not return the value SET stored ($(wc -c <"$tmp/cli.out") bytes back)"
	cli "$mode" STRLEN ferry:value
	[ "$out" = "$(wc -c <"$tmp/value")" ] || fail "$what: STRLEN says '$out'"
	[ "$failed" != "$failed_before" ] || note "ok: $what: PING, SET and GET of 256 KiB"

	bench "redis-benchmark -q -n 2000 ($(describe "$mode"))" "$mode"
	bench "redis-benchmark -q -n 2000 -P 16 ($(describe "$mode"))" "$mode" -P 16

	cli "$mode" SHUTDOWN NOSAVE
	reap "$server_pid" 30
	[ "$reaped" = 0 ] || fail "$what: the server exited with $reaped"
	no_ferry_errors "$what, server" "$tmp/redis-$mode.err"
	server_transport "$what" "$mode" "$tmp/redis-$mode.err"
	if grep -E '^[0-9]+:[A-Z] .* # .*(rror|failed)' "$tmp/redis-$mode/log" | grep -q .; then
		fail "$what: the server logged errors:"
		grep -E '^[0-9]+:[A-Z] .* # .*(rror|failed)' "$tmp/redis-$mode/log" | head -n 5
	fi
}

for mode in $modes; do
	run "$mode"
done
finish
