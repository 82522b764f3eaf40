#!/usr/bin/env bash
# stat-fork.sh - ferry-stat sees a connection that lives in a forked child:
# fork-echo (the parent accepts, forks, closes its copy; the child echoes)
# and a socat client whose input is a FIFO the test holds.  Once a line has
# gone there and back, with both ends under the preload ferry-stat must
# list two established shm connections on the port, one per end, each
# having sent and received the line, the server's owned by a fork-echo
# process; in the other modes (TCP, mixed) none.  Then the FIFO is closed
# and both ends must end cleanly.
set -u
prog="stat-fork.sh"
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need socat

fork_echo=$builddir/tests/preload/fork-echo
stat=$builddir/tools/ferry-stat
[ -x "$fork_echo" ] || skip "$fork_echo is not built (make check builds it)"
[ -x "$stat" ] || skip "$stat is not built"

line="ferry stat probe"	# 17 bytes with its newline

# listed PORT: "sent received process" of each established shm connection
# ferry-stat lists on PORT.
listed() {
	"$stat" -n -H |
		awk -v p=":$1" '$1 == "ESTAB" && $2 == "shm" &&
			(substr($3, length($3) - length(p) + 1) == p ||
			 substr($4, length($4) - length(p) + 1) == p) {
				sub(/^users:\(\("/, "", $9); sub(/".*/, "", $9); print $5, $6, $9 }' |
		sort
}

probe() {
	local mode=$1 what got want failed_before=$failed
	what="fork-echo ($(describe "$mode"))"
	serve "fork-$mode" "$mode" "$fork_echo" @PORT@ 1 || return
	rm -f "$tmp/fifo" "$tmp/echoed"
	mkfifo "$tmp/fifo"
	wrap_for "$mode" client
	( exec "${wrap[@]}" socat -t 30 - "TCP:127.0.0.1:$port" ) \
		<"$tmp/fifo" >"$tmp/echoed" 2>"$tmp/client.err" &
	client_pid=$!
	pids+=("$client_pid")
	exec 4>"$tmp/fifo"
	echo "$line" >&4
	for _ in $(seq 400); do
		grep -qx "$line" "$tmp/echoed" && break
		kill -0 "$client_pid" 2>/dev/null || break
		sleep 0.05
	done
	if ! grep -qx "$line" "$tmp/echoed"; then
		fail "$what: the line did not come back: $(cat "$tmp/client.err")"
	else
		got=$(listed "$port")
		want=""
		[ "$mode" != ferry ] || want=$(printf '17 17 fork-echo\n17 17 socat')
		[ "$got" = "$want" ] ||
			fail "$what: ferry-stat lists '$got' (sent, received, process) on port" \
				"$port, not '$want': $("$stat" -n)"
	fi
	exec 4>&-
	reap "$client_pid" 30
	[ "$reaped" = 0 ] || fail "$what: the client exited with $reaped: $(cat "$tmp/client.err")"
	reap "$server_pid" 30
	[ "$reaped" = 0 ] || fail "$what: the server exited with $reaped: $(cat "$server_err")"
	[ "$failed" != "$failed_before" ] || note "ok: $what: ferry-stat lists '${got//$'\n'/, }'"
}

for mode in $modes; do
	probe "$mode"
done
finish
