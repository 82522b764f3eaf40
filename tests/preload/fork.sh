#!/usr/bin/env bash
# fork.sh - a forking echo server (fork-echo: accept in the parent, a child
# per connection echoes, the parent closes its copy at once) with echo
# clients that send a stream of their own and check every byte that comes
# back while they send: plain TCP, both ends under the preload, and each
# end alone under it (mixed: over TCP).  Two runs each:
#   together   four clients at the same time, 16 MiB each;
#   in-turn    three clients one after the other, 4 MiB each, so that the
#              parent accepts after a child has closed its inherited copy
#              of the listener and ended;
#   late       the same, but the parent closes its copy of each connection
#              only once the child has echoed 1 MiB (fork-echo ... late),
#              so that the close comes while the child uses it, every time
#              (not only when the parent happens to be slow);
#   after      the same, but the parent holds its copy until the child has
#              exited (fork-echo ... after): its close ends the connection.
# Every run: each client gets its bytes back intact and then EOF, every
# child reports what it echoed, and the server exits 0 (every child did).
set -u
prog=fork.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"

server=$builddir/tests/preload/fork-echo
echo_client=$builddir/tests/preload/echo-client
[ -x "$server" ] && [ -x "$echo_client" ] ||
	skip "$server or $echo_client is not built (make check builds them)"

# run MODE NAME CLIENTS MIB AT-ONCE [HOW]: one server for CLIENTS clients
# of MIB MiB each, all at once (yes) or one after the other (no); HOW is
# fork-echo's late or after.
run() {
	local mode=$1 name=$2 clients=$3 bytes=$(( $4 * 1048576 )) together=$5 how=${6:-}
	local what failed_before=$failed i cpids=() deadline
	what="fork-echo, $name ($(describe "$mode"))"
	serve "fork-$mode-$name" "$mode" "$server" @PORT@ "$clients" ${how:+"$how"} || return
	wrap_for "$mode" client
	rm -f "$tmp"/client?.err
	# 60 s for all the clients, whether they run at once or in turn.
	deadline=$(( SECONDS + 60 ))
	for i in $(seq "$clients"); do
		spawn "$tmp/client$i.out" "$tmp/client$i.err" \
			"${wrap[@]}" "$echo_client" "$port" "$bytes" "$i"
		cpids+=("$spawned")
		[ "$together" = yes ] || reap_client "$i"
	done
	if [ "$together" = yes ]; then
		for i in $(seq "$clients"); do
			reap_client "$i"
		done
	fi
	reap "$server_pid" 30
	[ "$reaped" = 0 ] || fail "$what: the server exited with $reaped: $(cat "$server_err")"
	i=$(grep -c "^fork-echo\[[0-9]*\]: echoed $bytes bytes$" "$tmp/fork-$mode-$name.out")
	[ "$i" = "$clients" ] || fail "$what: $i children, not $clients, echoed $bytes bytes:" \
		"$(cat "$tmp/fork-$mode-$name.out")"
	no_ferry_errors "$what, server" "$server_err"
	client_transport "$what" "$mode" "$tmp"/client?.err
	server_transport "$what" "$mode" "$server_err"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

# reap_client I: wait for client I of run (its variables) until the deadline.
reap_client() {
	reap "${cpids[$1 - 1]}" $(( deadline > SECONDS ? deadline - SECONDS : 1 ))
	[ "$reaped" = 0 ] && grep -qx "echo-client: $bytes bytes echoed intact" "$tmp/client$1.out" ||
		fail "$what: client $1 exited with $reaped: $(cat "$tmp/client$1.out" "$tmp/client$1.err")"
	no_ferry_errors "$what, client $1" "$tmp/client$1.err"
}

for mode in $modes; do
	run "$mode" together 4 16 yes
	run "$mode" in-turn 3 4 no
	run "$mode" late 3 4 no late
	run "$mode" after 2 4 no after
done
finish
