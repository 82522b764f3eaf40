#!/usr/bin/env bash
# fork.sh - a forking echo server (fork-echo: accept in the parent, a child
# per connection echoes, the parent closes its copy at once) with four
# echo clients at the same time, each sending 16 MiB of its own stream and
# checking every byte that comes back while it sends: plain TCP, both ends
# under the preload, and each end alone under it (mixed: over TCP).  Every
# run: each client gets its bytes back intact and then EOF, every child
# reports the 16 MiB it echoed, and the server exits 0 (every child did).
set -u
prog=fork.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"

server=$builddir/tests/preload/fork-echo
echo_client=$builddir/tests/preload/echo-client
[ -x "$server" ] && [ -x "$echo_client" ] ||
	skip "$server or $echo_client is not built (make check builds them)"

clients=4
bytes=$(( 16 * 1048576 ))

run() {
	local mode=$1 what failed_before=$failed i cpids=() deadline
	what="fork-echo ($(describe "$mode"))"
	serve "fork-$mode" "$mode" "$server" @PORT@ "$clients" || return
	wrap_for "$mode" client
	for i in $(seq "$clients"); do
		spawn "$tmp/client$i.out" "$tmp/client$i.err" \
			"${wrap[@]}" "$echo_client" "$port" "$bytes" "$i"
		cpids+=("$spawned")
	done
	# The clients run at once: 60 s for them all.
	deadline=$(( SECONDS + 60 ))
	for i in $(seq "$clients"); do
		reap "${cpids[i - 1]}" $(( deadline > SECONDS ? deadline - SECONDS : 1 ))
		[ "$reaped" = 0 ] && grep -qx "echo-client: $bytes bytes echoed intact" "$tmp/client$i.out" ||
			fail "$what: client $i exited with $reaped: $(cat "$tmp/client$i.out" "$tmp/client$i.err")"
		no_ferry_errors "$what, client $i" "$tmp/client$i.err"
	done
	reap "$server_pid" 30
	[ "$reaped" = 0 ] || fail "$what: the server exited with $reaped: $(cat "$tmp/fork-$mode.err")"
	i=$(grep -c "^fork-echo\[[0-9]*\]: echoed $bytes bytes$" "$tmp/fork-$mode.out")
	[ "$i" = "$clients" ] || fail "$what: $i children, not $clients, echoed $bytes bytes:" \
		"$(cat "$tmp/fork-$mode.out")"
	no_ferry_errors "$what, server" "$tmp/fork-$mode.err"
	client_transport "$what" "$mode" "$tmp"/client?.err
	server_transport "$what" "$mode" "$tmp/fork-$mode.err"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

for mode in $modes; do
	run "$mode"
done
finish
