#!/usr/bin/env bash
# transport.sh - did the preload really carry the connection over ferry, or
# silently over TCP?  Asked from outside the programs, not only from the
# shim's log as the other scripts do:
#   - once the server listens: the ferry listener's rendezvous, a listening
#     abstract AF_UNIX socket "@ferry/cm/v2/PORT/INODE/COOKIE" named after
#     the server's TCP socket (cm/cm_shm_owner.c), is there exactly when
#     the server is under the preload;
#   - while a connection is open and idle between the server and a socat
#     client whose input is a FIFO the test holds (a line has gone there
#     and back first): the kernel TCP connections on the port (ss) are none
#     when both ends are under the preload (ferry carries it), two (one per
#     end) in every other run: plain TCP, and mixed, where the preloaded
#     end must fall back to TCP;
#   - at the same moment, ferry-stat lists two established shm connections
#     on the port, one per end, each having sent and received the line,
#     when both ends are under the preload, and none otherwise (for the
#     socat server; a connection a forked child holds is stat-fork.sh's).
# Servers: fork-echo (the connection lives in a forked child) and socat
# echoing through a PIPE.  Then the FIFO is closed and both ends must end
# cleanly, the line echoed once.
set -u
prog=transport.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need socat

fork_echo=$builddir/tests/preload/fork-echo
[ -x "$fork_echo" ] || skip "$fork_echo is not built (make check builds it)"

# tcp_conns PORT: kernel TCP connections established to or from PORT.
tcp_conns() {
	ss -Htn state established "( sport = :$1 or dport = :$1 )" | grep -c .
}

# rendezvous PORT: how many ferry listeners' rendezvous sockets for TCP
# port PORT listen in this network namespace (/proc/net/unix: flags
# 00010000 and state 01 are a listening socket; a connection accepted
# from it shows the same name).
rendezvous() {
	awk -v prefix="@ferry/cm/v2/$1/" \
		'$4 == "00010000" && $6 == "01" && index($8, prefix) == 1 { n++ }
		 END { print n + 0 }' /proc/net/unix
}

# ferry_conns PORT: "rows sent received" for every established shm
# connection ferry-stat lists on PORT, one a line.
ferry_conns() {
	"$builddir/tools/ferry-stat" -n -H |
		awk -v p=":$1" '$1 == "ESTAB" && $2 == "shm" &&
			(substr($3, length($3) - length(p) + 1) == p ||
			 substr($4, length($4) - length(p) + 1) == p) { print $5, $6 }'
}

# probe MODE NAME SERVER-COMMAND...: one held connection and its checks.
probe() {
	local mode=$1 name=$2 what conns want_conns want_rv rv listed want_listed
	local failed_before=$failed
	shift 2
	what="$name ($(describe "$mode"))"
	case $mode in
	ferry) want_conns=0 want_rv=1 ;;
	srv) want_conns=2 want_rv=1 ;;
	*) want_conns=2 want_rv=0 ;;
	esac
	serve "$name-$mode" "$mode" "$@" || return
	rv=$(rendezvous "$port")
	[ "$rv" = "$want_rv" ] ||
		fail "$what: $rv ferry rendezvous sockets listen for port $port, not $want_rv"
	rm -f "$tmp/fifo" "$tmp/echoed"
	mkfifo "$tmp/fifo"
	wrap_for "$mode" client
	( exec "${wrap[@]}" socat -t 30 - "TCP:127.0.0.1:$port" ) \
		<"$tmp/fifo" >"$tmp/echoed" 2>"$tmp/client.err" &
	client_pid=$!
	pids+=("$client_pid")
	exec 4>"$tmp/fifo"
	echo "ferry transport probe" >&4
	for _ in $(seq 400); do
		grep -q '^ferry transport probe$' "$tmp/echoed" && break
		kill -0 "$client_pid" 2>/dev/null || break
		sleep 0.05
	done
	if ! grep -q '^ferry transport probe$' "$tmp/echoed"; then
		fail "$what: the line did not come back: $(cat "$tmp/client.err")"
	else
		conns=$(tcp_conns "$port")
		[ "$conns" = "$want_conns" ] ||
			fail "$what: $conns kernel TCP connections on port $port, not $want_conns:" \
				"$(ss -Htnp state established "( sport = :$port or dport = :$port )")"
		if [ -x "$builddir/tools/ferry-stat" ] && [ "$name" != fork-echo ]; then
			listed=$(ferry_conns "$port")
			if [ "$mode" = ferry ]; then
				want_listed=$(printf '22 22\n22 22')
			else
				want_listed=""
			fi
			[ "$listed" = "$want_listed" ] ||
				fail "$what: ferry-stat lists '$listed' (sent, received) on port $port," \
					"not '$want_listed': $("$builddir/tools/ferry-stat" -n)"
		fi
	fi
	exec 4>&-
	reap "$client_pid" 30
	[ "$reaped" = 0 ] || fail "$what: the client exited with $reaped: $(cat "$tmp/client.err")"
	[ "$(cat "$tmp/echoed")" = "ferry transport probe" ] ||
		fail "$what: the client got back '$(head -c 200 "$tmp/echoed")'"
	reap "$server_pid" 30
	[ "$reaped" = 0 ] || fail "$what: the server exited with $reaped: $(cat "$tmp/$name-$mode.err")"
	client_transport "$what" "$mode" "$tmp/client.err"
	server_transport "$what" "$mode" "$tmp/$name-$mode.err"
	[ "$failed" != "$failed_before" ] ||
		note "ok: $what: $conns kernel TCP connections, $rv ferry rendezvous"
}

for mode in $modes; do
	probe "$mode" fork-echo "$fork_echo" @PORT@ 1
	probe "$mode" socat-echo socat -t 30 "TCP-LISTEN:@PORT@,bind=127.0.0.1,reuseaddr" PIPE
done
finish
