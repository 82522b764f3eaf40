#!/usr/bin/env bash
# socat.sh - socat relaying a 32 MiB file of random bytes: plain TCP, both
# ends under the preload, and each end alone under it (mixed: still works,
# over TCP).  Three relays each run:
#   up    socat -u - TCP:...         ->  socat -u TCP-LISTEN:... CREATE:file
#   down  socat -u TCP:... -         <-  socat -u OPEN:file TCP-LISTEN:...
#   echo  socat - TCP:... (both ways)   <->  socat TCP-LISTEN:... PIPE
# Both ends exit 0 and the file arrives with the original's sha256.  The
# echo sends only 4 KiB (the first of the file) and needs a half-close (the
# client's EOF) to reach the server while data still comes back; -t only
# bounds how long socat waits for the other direction after an EOF.  (With
# more than the buffers hold, socat's blocking writes deadlock its echo
# over plain TCP too: each end waits to write while the other does;
# fork.sh's echo client avoids that with poll and non-blocking writes.)
set -u
prog=socat.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need socat

random_file "$tmp/file" 32
head -c 4096 "$tmp/file" >"$tmp/file.4k"
listen="TCP-LISTEN:@PORT@,bind=127.0.0.1,reuseaddr"

# relay MODE NAME FILE SERVER-ADDRESSES CLIENT-ADDRESSES...: one relay;
# the client's stdin is FILE, the received file in $tmp/got.
relay() {
	local mode=$1 name=$2 file=$3 server=$4 what want failed_before=$failed
	shift 4
	want=$(sha "$file")
	what="socat $name ($(describe "$mode"))"
	rm -f "$tmp/got"
	# shellcheck disable=SC2086 # $server is a word list on purpose
	serve "socat-$mode-$name" "$mode" socat -t 60 $server || return
	client "$mode" 60 socat -t 60 "${@//@PORT@/$port}" <"$file" >"$tmp/client.out" 2>"$tmp/client.err"
	[ $rc = 0 ] || fail "$what: the client exited with $rc: $(cat "$tmp/client.err")"
	reap "$server_pid" 30
	[ "$reaped" = 0 ] ||
		fail "$what: the server exited with $reaped: $(cat "$tmp/socat-$mode-$name.err")"
	[ "$name" = up ] || mv "$tmp/client.out" "$tmp/got"
	[ -f "$tmp/got" ] && [ "$(sha "$tmp/got")" = "$want" ] ||
		fail "$what: the file arrived changed: $(how_changed "$file" "$tmp/got")"
	no_ferry_errors "$what, client" "$tmp/client.err"
	no_ferry_errors "$what, server" "$tmp/socat-$mode-$name.err"
	client_transport "$what" "$mode" "$tmp/client.err"
	server_transport "$what" "$mode" "$tmp/socat-$mode-$name.err"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

for mode in $modes; do
	relay "$mode" up "$tmp/file" "-u $listen CREATE:$tmp/got" -u - "TCP:127.0.0.1:@PORT@"
	relay "$mode" down "$tmp/file" "-u OPEN:$tmp/file $listen" -u "TCP:127.0.0.1:@PORT@" -
	relay "$mode" echo "$tmp/file.4k" "$listen PIPE" - "TCP:127.0.0.1:@PORT@"
done
finish
