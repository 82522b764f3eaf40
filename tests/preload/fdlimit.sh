#!/usr/bin/env bash
# fdlimit.sh - a server short of file descriptors: python3's threaded
# http.server under `ulimit -n 40`, and 30 curl clients at once.  Kernel TCP
# serves all 30 (what the kernel cannot hand over yet waits in the backlog);
# under the preload every client must be served as well, over ferry or, for
# a connection ferry could not make for want of descriptors, whole over TCP:
# no reset, no error, and the program itself never runs short (a listener
# with TCP beside it sends clients there while descriptors are short).
# The listener must not spin on the error either: it
# says once that it is out of descriptors and pauses, where it used to log
# "Too many open files" hundreds of times a second.
#
# The shim keeps descriptors of its own in every process it runs in (its
# threads' epoll sets and eventfds, the ferry listener's rendezvous socket,
# the ferry-stat segment: about ten, ferry(7)).  What this checks is that
# ferry's connections leave the program the room TCP's leave it, so the
# server under the preload gets the same room for itself: 40 plus what
# the shim holds when it is idle, measured here and shown.
set -u
prog=fdlimit.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need curl python3
py=$(python3_bin)
clients=30
limit=40
shim=

mkdir -p "$tmp/www"
random_file "$tmp/www/page" 1

# start MODE LIMIT: the server of a MODE run, under ulimit -n LIMIT.
start() {
	serve "fd-$1" "$1" bash -c "ulimit -n $2 && exec \"\$0\" \"\$@\"" "$py" -u \
		-m http.server --bind 127.0.0.1 --directory "$tmp/www" @PORT@
}

# idle_fds MODE: how many descriptors the idle server of a MODE run holds.
idle_fds() {
	local n
	start "$1" "$limit" || return 1
	n=$(ls "/proc/$server_pid/fd" | wc -l)
	kill -TERM "$server_pid"
	reap "$server_pid" 30
	echo "$n"
}

run() {
	local mode=$1 what failed_before=$failed i ok=0 spins cpids=() via_ferry=- room=$limit
	if [ "$mode" = ferry ]; then
		shim=$(( $(idle_fds ferry) - $(idle_fds tcp) ))
		room=$(( limit + shim ))
	fi
	what="$clients clients of http.server under ulimit -n $room ($(describe "$mode"))"
	start "$mode" "$room" || return
	wrap_for "$mode" client
	for i in $(seq "$clients"); do
		{ timeout -k 5 60 "${wrap[@]}" curl -sS --noproxy '*' -o "$tmp/got.$i" \
			"http://127.0.0.1:$port/page" >"$tmp/c.$i.out" 2>"$tmp/c.$i.err"
		  echo "curl exited with $?" >>"$tmp/c.$i.err"; } &
		cpids+=($!)
	done
	wait "${cpids[@]}"
	for i in $(seq "$clients"); do
		if cmp -s "$tmp/got.$i" "$tmp/www/page"; then
			ok=$((ok + 1))
		else
			note "client $i: $(grep -v "debug: cm:" "$tmp/c.$i.err" | tail -n 5)"
			note "client $i got: $(head -c 300 "$tmp/got.$i" 2>/dev/null | tr -c '[:print:]\n' .)"
		fi
	done
	[ "$ok" = "$clients" ] || fail "$what: $ok of $clients served"
	if [ "$mode" = ferry ]; then
		via_ferry=$(cat "$tmp"/c.*.err | grep -Ec "connect to 127\.0\.0\.1:$port: ferry\$")
		[ "$via_ferry" -gt 0 ] || fail "$what: no client went over ferry"
	fi
	kill -TERM "$server_pid"
	reap "$server_pid" 30
	spins=$(grep -c 'accepting a connection: Too many open files' "$server_err")
	[ "$spins" -le 2 ] ||
		fail "$what: the listener logged its accept error $spins times (a spin)"
	for i in $(seq "$clients"); do
		no_ferry_errors "$what, client $i" "$tmp/c.$i.err"
	done
	rm -f "$tmp"/got.* "$tmp"/c.*
	[ "$failed" != "$failed_before" ] || note "ok: $what ($via_ferry over ferry," \
		"$(grep -c 'cannot accept' "$server_err") pauses${shim:+; the shim holds $shim when idle})"
}

for mode in tcp ferry; do
	[[ " $modes " == *" $mode "* ]] || continue
	run "$mode"
done
finish
