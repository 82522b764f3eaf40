#!/usr/bin/env bash
# scm_rights.sh - sockets passed between processes with SCM_RIGHTS (socket
# activation, binary upgrades), with scm-pass.py:
#   listener  a sender under the preload listens and passes its listener to
#             a receiver (under the preload, then plain) that accepts;
#             the sender never accepts.  Every client, ferry ones (under
#             the preload, which say they went TCP) and plain TCP ones,
#             is served by the receiver:
#             none is taken into the sender's ferry listener (it would
#             wait there for good); the sender says its listener went TCP.
#   conn      a connection the sender made over ferry cannot be passed:
#             sendmsg fails with EOPNOTSUPP (python: ENOTSUP, the same) and the receiver gets nothing;
#             over TCP (plain) it passes.
set -u
prog=scm_rights.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need python3
py=$(python3_bin)
helper=$(dirname "$0")/scm-pass.py

# listener RECV-MODE: RECV-MODE ferry (under the preload) or tcp (plain).
listener() {
	local rmode=$1 what i rpid spid path=$tmp/u-$1 clients=3 got
	what="passed listener, receiver $( [ "$rmode" = ferry ] && echo "under the preload" || echo plain)"
	port=$(pick_port)
	wrap_for "$rmode" server
	spawn "$tmp/recv-$rmode.out" "$tmp/recv-$rmode.err" "${wrap[@]}" "$py" "$helper" \
		receiver "$path" "$clients"
	rpid=$spawned
	for i in $(seq 200); do [ -S "$path" ] && break; sleep 0.05; done
	wrap_for ferry server
	spawn "$tmp/send-$rmode.out" "$tmp/send-$rmode.err" "${wrap[@]}" "$py" "$helper" \
		sender "$port" "$path"
	spid=$spawned
	for i in $(seq 200); do grep -q "got" "$tmp/recv-$rmode.out" && break; sleep 0.05; done
	grep -q "^receiver: got 1 fds$" "$tmp/recv-$rmode.out" ||
		{ fail "$what: the receiver did not get exactly one fd:" \
			"$(cat "$tmp/recv-$rmode.out" "$tmp/recv-$rmode.err")"; slay "$rpid"; slay "$spid"; return; }
	# two ferry clients, one plain
	for i in 1 2 3; do
		if [ "$i" = 3 ]; then wrap_for tcp client; else wrap_for ferry client; fi
		got=$(timeout -k 2 10 "${wrap[@]}" "$py" "$helper" client "$port" 2>"$tmp/cli$i.err")
		[ "$got" = "served by receiver" ] ||
			fail "$what: client $i got '$got', not served by the receiver:" \
				"$(grep -v debug "$tmp/cli$i.err" | head -n 3)"
		# and over TCP: no ferry listener is left on the port
		[ "$i" = 3 ] || grep -Eq "^ferry\[[0-9]+\]: info: connect to 127\.0\.0\.1:$port: .*: TCP\$" \
			"$tmp/cli$i.err" || fail "$what: ferry client $i does not say it went TCP:" \
				"$(grep connect "$tmp/cli$i.err" | head -n 3)"
	done
	reap "$rpid" 10
	[ "$reaped" = 0 ] || fail "$what: the receiver exited with $reaped: $(cat "$tmp/recv-$rmode.err")"
	reap "$spid" 10
	grep -Eq "^ferry\[[0-9]+\]: info: fd [0-9]+: a listener passed with SCM_RIGHTS: TCP only" \
		"$tmp/send-$rmode.err" || fail "$what: the sender does not say its listener went TCP:" \
			"$(cat "$tmp/send-$rmode.err")"
	no_ferry_errors "$what, sender" "$tmp/send-$rmode.err"
	no_ferry_errors "$what, receiver" "$tmp/recv-$rmode.err"
	[ "$failed" != 0 ] || note "ok: $what"
}

# conn MODE: a connection made by a sender under the preload (ferry) or
# plain (tcp) to a server under the preload, passed to a plain receiver.
conn() {
	local mode=$1 what path=$tmp/c-$1 rpid cpid out want
	what="passed connection, $(describe "$mode")"
	# the peer: a server under the preload that prints the line it gets
	port=$(pick_port)
	wrap_for ferry server
	spawn "$tmp/echo-$mode.out" "$tmp/echo-$mode.err" "${wrap[@]}" "$py" -c "
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('127.0.0.1', $port)); l.listen(4)
a, _ = l.accept(); print(a.makefile().readline().strip(), flush=True)"
	cpid=$spawned
	for i in $(seq 200); do ready "$cpid" "$port" "$tmp/echo-$mode.err" yes && break; sleep 0.05; done
	spawn "$tmp/crecv-$mode.out" "$tmp/crecv-$mode.err" "$py" -c "
import socket
u = socket.socket(socket.AF_UNIX); u.bind('$path'); u.listen(1)
c, _ = u.accept()
try:
    m, fds, _, _ = socket.recv_fds(c, 16, 16)
    print('got %d fds' % len(fds), flush=True)
except OSError as e:
    print('error', e, flush=True)"
	rpid=$spawned
	for i in $(seq 200); do [ -S "$path" ] && break; sleep 0.05; done
	wrap_for "$( [ "$mode" = ferry ] && echo ferry || echo tcp)" client
	out=$(timeout -k 2 10 "${wrap[@]}" "$py" "$helper" conn "$port" "$path" 2>"$tmp/conn-$mode.err")
	if [ "$mode" = ferry ]; then want="conn: refused: ENOTSUP"; else want="conn: passed"; fi
	[ "$out" = "$want" ] || fail "$what: the sender said '$out', not '$want'"
	reap "$rpid" 10
	if [ "$mode" = ferry ]; then
		grep -q "^got 0 fds$" "$tmp/crecv-$mode.out" ||
			fail "$what: the receiver got: $(cat "$tmp/crecv-$mode.out")"
		reap "$cpid" 10
		grep -q "^still mine$" "$tmp/echo-$mode.out" ||
			fail "$what: the peer did not get the sender's bytes: $(cat "$tmp/echo-$mode.out")"
	else
		grep -q "^got 1 fds$" "$tmp/crecv-$mode.out" ||
			fail "$what: the receiver got: $(cat "$tmp/crecv-$mode.out")"
		slay "$cpid"
	fi
	[ "$failed" != 0 ] || note "ok: $what"
}

listener ferry
listener tcp
conn ferry
conn tcp
finish
