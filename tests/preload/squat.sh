#!/usr/bin/env bash
# squat.sh - a user who binds ferry rendezvous names for ports it does not
# own must get nothing (issue 13: "hijack ports it could never bind").
#
# The squatter runs as nobody (setpriv) and binds, as listening abstract
# AF_UNIX SOCK_SEQPACKET sockets, every name that could be derived from
# address and port alone (ferry 1 used "ferry/cm/v1/inet/127.0.0.1/PORT",
# the wildcards, and the same shape again under v2): for the port of
# python3's http.server (root, under ferry-run) and for privileged port 81,
# where nothing listens.  It prints a line for every connection it
# accepts.  Runs:
#   - server first, squatter after: ferry-run curl gets the server's page
#     over ferry; ferry-run curl on port 81 is refused (exit 7) as plain
#     curl is;
#   - squatter first, server after: the server still gets its ferry
#     listener ("listen on ...: TCP and ferry"), and ferry-run curl gets
#     the page over ferry.
# Every time the squatter must have accepted no connection.  Needs root
# (the squatter is another uid), setpriv, curl and python3; a skip without.
set -u
prog=squat.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need curl python3 setpriv
[ "$(id -u)" = 0 ] || skip "needs root: the squatter must be another user (nobody)"
py=$(python3_bin)
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
"${as_nobody[@]}" "$py" -c pass 2>/dev/null ||
	skip "$py does not run as nobody (setpriv --reuid=65534)"
priv=81
privileged=no
[ "$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start 2>/dev/null || echo 1024)" -gt $priv ] &&
	privileged=yes
ss -Hltn "sport = :$priv" | grep -q . && privileged=no	# someone serves 81 here

mkdir -p "$tmp/www"
printf 'the real server\n' >"$tmp/www/index.txt"

# The squatter: binds what it can of the names for the ports given, says
# "ready", then prints "conn NAME" for each connection until killed.  Run
# with -c: nobody cannot read root's files.
squatter_code='
import select, socket, sys
names = []
for port in sys.argv[1:]:
    for v in ("v1", "v2"):
        for fam, addr in (("inet", "127.0.0.1"), ("inet", "0.0.0.0"), ("inet6", "::")):
            names.append("ferry/cm/%s/%s/%s/%s" % (v, fam, addr, port))
socks = {}
for name in names:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.bind("\0" + name)
        s.listen(16)
        socks[s] = name
        print("bound", name, flush=True)
    except OSError as e:
        print("taken", name, e, flush=True)
print("ready", flush=True)
while True:
    for s in select.select(list(socks), [], [])[0]:
        c, _ = s.accept()
        print("conn", socks[s], flush=True)
'

# squat PORT...: start the squatter; its output in $tmp/squat.out.
squat() {
	local i
	spawn "$tmp/squat.out" "$tmp/squat.err" "${as_nobody[@]}" "$py" -c "$squatter_code" "$@"
	squatter_pid=$spawned
	for i in $(seq 200); do
		grep -q '^ready$' "$tmp/squat.out" && return 0
		kill -0 "$squatter_pid" 2>/dev/null || break
		sleep 0.05
	done
	fail "the squatter did not start: $(cat "$tmp/squat.err")"
	return 1
}

# squat_end WHAT: stop the squatter; fail if it saw a connection.
squat_end() {
	slay "$squatter_pid"
	wait "$squatter_pid" 2>/dev/null
	if grep -q '^conn ' "$tmp/squat.out"; then
		fail "$1: the squatter got connections:"
		grep '^conn ' "$tmp/squat.out" | head -n 5
	fi
}

# http_server PORT NAME: python3's http.server as root under ferry-run on
# PORT; $server_pid once it listens and the shim is done with its listen().
http_server() {
	local i
	ferry_prefix
	spawn "$tmp/$2.out" "$tmp/$2.err" "${wrap[@]}" "$py" -u -m http.server \
		--bind 127.0.0.1 --directory "$tmp/www" "$1"
	server_pid=$spawned
	for i in $(seq 400); do
		ready "$server_pid" "$1" "$tmp/$2.err" yes && return 0
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.05
	done
	fail "$2: http.server did not come up on port $1: $(cat "$tmp/$2.err")"
	return 1
}

# fetch WHAT: ferry-run curl of the page on $port must bring the real
# server's answer, over ferry.
fetch() {
	client ferry 30 curl -sS --noproxy '*' "http://127.0.0.1:$port/index.txt" \
		>"$tmp/got" 2>"$tmp/curl.err"
	[ "$rc" = 0 ] && cmp -s "$tmp/got" "$tmp/www/index.txt" ||
		fail "$1: curl ($rc) did not get the real server's page: $(cat "$tmp/got")" \
			"$(other_lines "$tmp/curl.err")"
	client_transport "$1" ferry "$tmp/curl.err"
	no_ferry_errors "$1, curl" "$tmp/curl.err"
}

# refused_81 WHAT: ferry-run curl on port 81 is refused, as plain curl is.
refused_81() {
	[ "$privileged" = yes ] || return 0
	client ferry 30 curl -sS --noproxy '*' "http://127.0.0.1:$priv/" \
		>"$tmp/got" 2>"$tmp/curl.err"
	[ "$rc" = 7 ] || fail "$1: ferry-run curl on port $priv exited $rc, not 7 (refused):" \
		"$(cat "$tmp/got") $(other_lines "$tmp/curl.err")"
}

server_end() {
	kill -TERM "$server_pid"
	reap "$server_pid" 30
	no_ferry_errors "$1, http.server" "$tmp/$2.err"
}

# Server first, squatter after.
what="server first, squatter after"
port=$(pick_port)
if http_server "$port" first; then
	ports=("$port")
	[ "$privileged" = yes ] && ports+=("$priv")
	if squat "${ports[@]}"; then
		fetch "$what"
		refused_81 "$what"
		squat_end "$what"
	fi
	server_end "$what" first
	[ "$privileged" = yes ] || note "port $priv is not privileged here or is served: not tried"
	[ "$failed" != 0 ] || note "ok: $what"
fi

# Squatter first, server after.
what="squatter first, server after"
failed_before=$failed
port=$(pick_port)
if squat "$port"; then
	grep -q "^bound ferry/cm/v1/inet/127.0.0.1/$port\$" "$tmp/squat.out" ||
		fail "$what: the squatter could not bind the names of port $port"
	if http_server "$port" after; then
		server_transport "$what" ferry "$tmp/after.err"
		fetch "$what"
		server_end "$what" after
	fi
	squat_end "$what"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
fi
finish
