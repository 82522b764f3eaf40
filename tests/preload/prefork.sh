#!/usr/bin/env bash
# prefork.sh - a pre-forked python3 server: the parent listens, forks three
# children and only waits; each child accepts (blocking accept() in one
# run, non-blocking accept from a selectors/epoll loop in the other) and
# answers every connection with its pid.  Clients under the preload must
# be served over ferry by the children, whichever accepts (the parent
# never does); a child killed with SIGKILL loses nothing but what it held,
# the others go on serving over ferry; a plain client is still served
# over TCP on the same port.  Both ends under the preload only: the
# shared listener is the point (fork.sh covers the mixed modes of a
# forking server).
set -u
prog=prefork.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
# Listeners shared by fork are not the shim's default yet (ferry-run(1)).
export FERRY_SHARE_LISTENERS=1
need python3
py=$(python3_bin)

cat >"$tmp/server.py" <<'EOF'
import os, selectors, signal, socket, sys

port, how = int(sys.argv[1]), sys.argv[2]
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(64)

def answer(c):
    c.sendall(b"%d\n" % os.getpid())
    c.close()

def child():
    if how == "blocking":
        while True:
            answer(l.accept()[0])
    l.setblocking(False)
    sel = selectors.DefaultSelector()   # epoll
    sel.register(l, selectors.EVENT_READ)
    while True:
        for _ in sel.select():
            try:
                c, _ = l.accept()
            except BlockingIOError:
                continue                # another child took it
            c.setblocking(True)
            answer(c)

kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        child()
    kids.append(pid)
print(" ".join(map(str, kids)), flush=True)
def end(*_):
    for k in kids:      # the children go with it (SIGTERM's default)
        try:
            os.kill(k, signal.SIGTERM)
        except ProcessLookupError:
            pass
    sys.exit(0)
signal.signal(signal.SIGTERM, end)
while True:
    signal.pause()
EOF

cat >"$tmp/client.py" <<'EOF'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    got = b""
    while not got.endswith(b"\n"):
        b = s.recv(64)
        if not b:
            break
        got += b
    s.close()
    print(got.decode().strip(), flush=True)
EOF

# check WHAT MODE N: N connections of a client (MODE ferry or tcp) each got
# a child's pid; the client's log says how they went (client_transport).
check() {
	local what=$1 mode=$2 n=$3 got bad
	client "$mode" 60 "$py" "$tmp/client.py" "$port" "$n" >"$tmp/got" 2>"$tmp/client.err"
	[ "$rc" = 0 ] || fail "$what: the client exited with $rc: $(other_lines "$tmp/client.err" | tail -n 3)"
	got=$(grep -c . "$tmp/got")
	[ "$got" = "$n" ] || fail "$what: $got answers of $n"
	bad=$(grep -cvxF -f <(tr ' ' '\n' <<<"$kids") "$tmp/got")
	[ "$bad" = 0 ] || fail "$what: $bad answers from no child: $(head -n 3 "$tmp/got")"
	grep -qx "$server_pid" "$tmp/got" && fail "$what: the parent, which never accepts, answered"
	no_ferry_errors "$what" "$tmp/client.err"
	client_transport "$what" "$mode" "$tmp/client.err"
	note "$what: served by $(sort -u "$tmp/got" | wc -l) of the children"
}

run() {
	local how=$1 what failed_before=$failed victim
	what="pre-forked python3 server, $how accept"
	serve "prefork-$how" ferry "$py" -u "$tmp/server.py" @PORT@ "$how" || return
	for _ in $(seq 100); do
		read -r kids <"$tmp/prefork-$how.out" 2>/dev/null && [ -n "$kids" ] && break
		sleep 0.05
	done
	check "$what" ferry 30
	grep -Eq "^ferry\[$server_pid\]: info: fd [0-9]+: a listener shared by fork" \
		"$server_err" || fail "$what: the server did not share its listener"

	# A child dies: the others serve the next clients, still over ferry.
	victim=$(head -n 1 "$tmp/got")
	kill -9 "$victim"
	kids=$(tr ' ' '\n' <<<"$kids" | grep -vx "$victim" | tr '\n' ' ')
	check "$what, after child $victim was killed" ferry 20

	# A plain client on the same port: TCP, served all the same.
	check "$what, a plain client" tcp 5

	kill -TERM "$server_pid"
	reap "$server_pid" 30
	no_ferry_errors "$what, the server" "$server_err"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

for how in blocking epoll; do
	run "$how"
done
finish
