#!/usr/bin/env bash
# tcp-netns.sh - the CM's tcp transport between two hosts: two network
# namespaces joined by a veth pair (10.77.0.1/24, 10.77.0.2/24), a
# ferry-ping server in one and a client in the other, FERRY_TRANSPORT
# unset, so the CM must pick tcp itself (neither shm nor verbs serves the
# other namespace's address).  Both ways, each with validation (-V);
# then with the server, and then the client, killed by SIGKILL mid-run:
# the survivor must end (an error, not a hang) within a bound; and
# ferry-perf's address form between the two.  Needs root and ip(8) with
# netns; skips otherwise.
set -u
# shellcheck source=tests/netns-lib.sh
. "$(dirname "$0")/netns-lib.sh"

prog="tcp-netns.sh"
ping=./tools/ferry-ping
ns1="ferry-tcp1-$$" ns2="ferry-tcp2-$$"
if1="fv1-$$" if2="fv2-$$"
a1=10.77.0.1 a2=10.77.0.2
# Bounds, generous for a slow shared machine: not timings under test.
run_s=60	# a ping run, a side's end after its peer died

[ -x "$ping" ] || skip "ferry-ping is not built"
netns_up

# server NS ADDR PORT LOG [args]: a ferry-ping server in the background.
server() {
	local ns=$1 addr=$2 port=$3 log=$4
	shift 4
	# Not through timeout(1), nor a function: $! must be ferry-ping itself.
	ip netns exec "$ns" "$ping" -s -a "$addr" -p "$port" "$@" >"$log" 2>&1 &
	pids+=($!)
	spid=$!
	wait_listening "$ns" "$port" || fail "no server listening on $addr port $port"
}

# One validated run from namespace $1 to the server in $2 at $3.
one_way() {
	local cns=$1 sns=$2 saddr=$3 port=$4 tag=$5
	server "$sns" "$saddr" "$port" "$tmp/$tag.server"
	if ! in_ns "$cns" timeout "$run_s" "$ping" -c -a "$saddr" -p "$port" -C 200 -V -S 4096 \
		>"$tmp/$tag.client" 2>&1; then
		fail "$tag: the client failed: $(cat "$tmp/$tag.client")"
	fi
	grep -q "200 pings" "$tmp/$tag.client" || fail "$tag: no summary: $(cat "$tmp/$tag.client")"
	bounded_wait "$spid" "$run_s" || fail "$tag: the server failed: $(cat "$tmp/$tag.server")"
	grep -q "served 200 pings" "$tmp/$tag.server" ||
		fail "$tag: the server served not 200 pings: $(cat "$tmp/$tag.server")"
}

one_way "$ns2" "$ns1" "$a1" 7174 "2to1"
one_way "$ns1" "$ns2" "$a2" 7175 "1to2"

# The server killed mid-run: the client (pinging until interrupted) ends.
server "$ns1" "$a1" 7176 "$tmp/kill-s.server"
ip netns exec "$ns2" "$ping" -c -a "$a1" -p 7176 -C 0 -V >"$tmp/kill-s.client" 2>&1 &
cpid=$!
pids+=($cpid)
sleep 2
kill -0 "$cpid" 2>/dev/null || fail "the client ended before its server was killed"
kill -9 "$spid"
bounded_wait "$cpid" "$run_s"
rc=$?
[ "$rc" = 124 ] && fail "the client did not end within ${run_s}s of its server's SIGKILL"
[ "$rc" = 0 ] && fail "the client reported success although its server was killed"

# The client killed mid-run: the server ends (it serves one client).
server "$ns1" "$a1" 7177 "$tmp/kill-c.server"
ip netns exec "$ns2" "$ping" -c -a "$a1" -p 7177 -C 0 >"$tmp/kill-c.client" 2>&1 &
cpid=$!
pids+=($cpid)
sleep 2
kill -0 "$spid" 2>/dev/null || fail "the server ended before its client was killed"
kill -9 "$cpid"
bounded_wait "$spid" "$run_s"
rc=$?
[ "$rc" = 124 ] && fail "the server did not end within ${run_s}s of its client's SIGKILL"

# ferry-perf's address form across the namespaces: the ferry rows go
# through the CM (tcp), the tcp rows the same path, both in one table.
perf=./tools/ferry-perf
if [ -x "$perf" ]; then
	ip netns exec "$ns1" timeout "$run_s" "$perf" -s -a "$a1" -P 7178 >"$tmp/perf.server" 2>&1 &
	pids+=($!)
	spid=$!
	if ! in_ns "$ns2" timeout "$run_s" "$perf" -c -a "$a1" -P 7178 -t lat,bw -o write_imm,read \
		-n 200 -D 0.05 >"$tmp/perf.client" 2>&1; then
		fail "ferry-perf -c -a: $(cat "$tmp/perf.client")"
	fi
	bounded_wait "$spid" "$run_s" || fail "ferry-perf -s -a: $(cat "$tmp/perf.server")"
	for row in "lat +write_imm +ferry-cm" "lat +read +ferry-cm" "lat +send +tcp" \
		"bw +write_imm +ferry-cm" "bw +read +ferry-cm" "bw +send +tcp" \
		"ferry-cm read 64 KiB bw / tcp 64 KiB bw"; do
		grep -qE "^ *$row" "$tmp/perf.client" ||
			fail "ferry-perf -a: no row '$row': $(cat "$tmp/perf.client")"
	done
	# every bw row carries both ends' CPU time per GB, a positive number
	awk '$1 == "bw" && !($NF > 0) { bad = 1 } END { exit bad }' "$tmp/perf.client" ||
		fail "ferry-perf -a: a bw row without its cpu s/GB: $(grep ^bw "$tmp/perf.client")"
	"$perf" --local -a "$a1" >/dev/null 2>&1
	[ $? = 2 ] || fail "ferry-perf --local -a was not refused as bad arguments"
fi

[ "$failed" = 0 ] && echo "$prog: PASS: ferry-ping over tcp both ways between namespaces," \
	"a SIGKILLed peer ends the other side, ferry-perf -a across them"
exit "$failed"
