#!/usr/bin/env bash
# kill.sh - a peer killed (SIGKILL) in the middle of a transfer: the
# survivor must notice and exit, never hang.  Plain TCP, both ends under
# the preload, and each end alone under it.  Five cases each:
#   server  socat sends /dev/zero without end to a socat client; the server
#           dies: the client exits (EOF or an error) once it has read what
#           was in flight;
#   client  the same, but the client dies: the server's writes fail and it
#           exits with an error;
#   http    curl fetches a 100 MiB file from python3's http.server, which
#           dies: curl exits with an error (the file is short);
#   idle-server, idle-client
#           socat -u sends what the test writes into a FIFO it holds open,
#           to a socat -u that prints it; once a line has arrived both sit
#           idle, the receiver waiting in a read, the sender on the FIFO;
#           then one dies: a receiver that survives must see EOF (or an
#           error) at once and exit; a sender that survives exits when it
#           next writes (the test writes another line).
# No clock decides when "the middle" is: the client writes into a FIFO the
# test reads 4 MiB from and then stops reading, so the transfer is stalled
# with the sender's buffers full when the kill comes; then the test drains
# the FIFO.  A survivor still there 30 s later has hung: that fails.
set -u
prog=kill.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need socat curl python3
py=$(python3_bin)

mkdir -p "$tmp/www"
random_file "$tmp/www/blob" 100
stall=$(( 4 * 1048576 ))

# start_reader MODE NAME COMMAND...: the client of a MODE run, writing into
# the FIFO $tmp/fifo, opened on fd 3 here; its pid in $client_pid.  Reads
# the first 4 MiB; returns 1 (after fail) if they do not come.
start_reader() {
	local mode=$1 name=$2 n
	shift 2
	rm -f "$tmp/fifo"
	mkfifo "$tmp/fifo"
	wrap_for "$mode" client
	spawn "$tmp/fifo" "$tmp/$name-client.err" "${wrap[@]}" "$@"
	client_pid=$spawned
	exec 3<"$tmp/fifo"
	n=$(timeout 30 head -c "$stall" <&3 | wc -c)
	if [ "$n" = "$stall" ]; then
		client_transport "$name ($(describe "$mode"))" "$mode" "$tmp/$name-client.err"
		server_transport "$name ($(describe "$mode"))" "$mode" "$server_err"
		return 0
	fi
	fail "$name ($(describe "$mode")): the client passed on $n bytes, not $stall:" \
		"$(cat "$tmp/$name-client.err")"
	return 1
}

# drain: read the FIFO to its end (the client closed it, or died); 1 if it
# has not ended in 30 s.
drain() {
	timeout 30 cat <&3 >/dev/null
	local rc=$?
	exec 3<&-
	return $rc
}

# murder PID: SIGKILL, without bash reporting the death of a job.
murder() {
	disown "$1" 2>/dev/null
	kill -9 "$1"
}

kill_server() {
	local mode=$1 what
	what="server killed under socat ($(describe "$mode"))"
	serve "zero-$mode" "$mode" socat -u /dev/zero \
		"TCP-LISTEN:@PORT@,bind=127.0.0.1,reuseaddr" || return
	start_reader "$mode" zero socat -u "TCP:127.0.0.1:$port" - || return
	murder "$server_pid"
	drain || fail "$what: the client still writes 30 s after"
	reap "$client_pid" 30
	if [ "$reaped" = 124 ]; then
		fail "$what: the client hung: $(cat "$tmp/zero-client.err")"
	else
		note "ok: $what: the client exited with $reaped"
	fi
}

kill_client() {
	local mode=$1 what
	what="client killed under socat ($(describe "$mode"))"
	serve "zero-$mode" "$mode" socat -u /dev/zero \
		"TCP-LISTEN:@PORT@,bind=127.0.0.1,reuseaddr" || return
	start_reader "$mode" zero socat -u "TCP:127.0.0.1:$port" - || return
	murder "$client_pid"
	drain
	reap "$server_pid" 30
	case $reaped in
	124) fail "$what: the server hung: $(other_lines "$tmp/zero-$mode.err")" ;;
	0) fail "$what: the server exited 0, as if all went well" ;;
	*) note "ok: $what: the server exited with $reaped:" \
		"$(other_lines "$tmp/zero-$mode.err" | tail -n 1)" ;;
	esac
}

kill_http() {
	local mode=$1 what
	what="http.server killed under curl ($(describe "$mode"))"
	serve "http-$mode" "$mode" "$py" -u -m http.server --bind 127.0.0.1 \
		--directory "$tmp/www" @PORT@ || return
	start_reader "$mode" curl curl -sS --noproxy '*' "http://127.0.0.1:$port/blob" ||
		return
	murder "$server_pid"
	drain || fail "$what: curl still writes 30 s after"
	reap "$client_pid" 30
	case $reaped in
	124) fail "$what: curl hung" ;;
	0) fail "$what: curl exited 0, as if the file were whole" ;;
	*) note "ok: $what: curl exited with $reaped: $(other_lines "$tmp/curl-client.err")" ;;
	esac
}

# kill_idle MODE VICTIM: the idle cases; VICTIM is server (the receiver)
# or client (the sender).
kill_idle() {
	local mode=$1 victim=$2 what survivor survivor_err
	what="idle $victim killed under socat ($(describe "$mode"))"
	rm -f "$tmp/fifo" "$tmp/printed"
	mkfifo "$tmp/fifo"
	# The receiver listens, the sender connects; the FIFO is opened by
	# the sender only once it is spawned, so hold it from here first.
	serve "idle-$mode" "$mode" socat -u \
		"TCP-LISTEN:@PORT@,bind=127.0.0.1,reuseaddr" "CREATE:$tmp/printed" || return
	wrap_for "$mode" client
	spawn /dev/null "$tmp/idle-client.err" \
		"${wrap[@]}" socat -u "OPEN:$tmp/fifo" "TCP:127.0.0.1:$port"
	client_pid=$spawned
	exec 4>"$tmp/fifo"
	echo "before the kill" >&4
	for _ in $(seq 400); do
		grep -qx "before the kill" "$tmp/printed" 2>/dev/null && break
		kill -0 "$client_pid" 2>/dev/null || break
		sleep 0.05
	done
	if ! grep -qx "before the kill" "$tmp/printed" 2>/dev/null; then
		fail "$what: the line did not arrive: $(cat "$tmp/idle-client.err" "$server_err")"
		exec 4>&-
		return
	fi
	client_transport "$what" "$mode" "$tmp/idle-client.err"
	if [ "$victim" = server ]; then
		murder "$server_pid"
		survivor=$client_pid survivor_err=$tmp/idle-client.err
		nudge
		reap "$survivor" 5
	else
		murder "$client_pid"
		survivor=$server_pid survivor_err=$server_err
		reap "$survivor" 30
	fi
	exec 4>&-
	case $reaped in
	124) fail "$what: the $( [ "$victim" = server ] && echo client || echo server) hung:" \
		"$(other_lines "$survivor_err")" ;;
	*) note "ok: $what: the survivor exited with $reaped" ;;
	esac
}

# nudge: give $survivor, a sender whose peer died, lines to send until it
# is gone (our write fails: nobody reads the FIFO), for at most 30 s.  A
# sender learns of a dead peer only when it writes, and over TCP its first
# write after the death may still be taken.
nudge() {
	local n
	for n in $(seq 300); do
		kill -0 "$survivor" 2>/dev/null || return 0
		# A subshell: the write may die of SIGPIPE once the sender is gone.
		( echo "nudge $n" >&4 ) 2>/dev/null || return 0
		sleep 0.1
	done
}

for mode in $modes; do
	kill_server "$mode"
	kill_client "$mode"
	kill_http "$mode"
	kill_idle "$mode" server
	kill_idle "$mode" client
done
finish
