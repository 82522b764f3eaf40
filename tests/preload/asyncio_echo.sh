#!/usr/bin/env bash
# asyncio_echo.sh - a python3 asyncio echo server and a client that writes
# 8 MiB before it reads a byte of the echo: plain TCP, both ends under the
# preload, and each end alone under it.  Neither end reads while its writes
# block (asyncio's drain() waits), so the run completes only when the
# connection buffers the 8 MiB as TCP's kernel buffers do: ferry's rings
# alone (128 KiB each way) once left both ends blocked writing, a hang.
# Every run: the client gets back every byte, in order (its sha256), within
# the time limit (a hang fails), and the server served one connection of
# exactly 8 MiB, raised nothing and still serves afterwards.
set -u
prog=asyncio_echo.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need python3
py=$(python3_bin)
mib=8

cat >"$tmp/server.py" <<'EOF'
import asyncio, sys

async def echo(reader, writer):
    total = 0
    while True:
        data = await reader.read(65536)
        if not data:
            break
        total += len(data)
        writer.write(data)
        await writer.drain()
    print("served", total, flush=True)
    writer.close()
    await writer.wait_closed()

async def main(port):
    server = await asyncio.start_server(echo, "127.0.0.1", port)
    async with server:
        await server.serve_forever()

asyncio.run(main(int(sys.argv[1])))
EOF

cat >"$tmp/client.py" <<'EOF'
import asyncio, hashlib, random, sys

async def main(port, size):
    data = random.Random(15).randbytes(size)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()	# all of it into the socket before any read
    writer.write_eof()
    got = await reader.readexactly(size)
    rest = await reader.read()
    writer.close()
    print("sent", hashlib.sha256(data).hexdigest(), "got",
          hashlib.sha256(got).hexdigest(), "extra", len(rest), flush=True)

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
EOF

run() {
	local mode=$1 what failed_before=$failed out sent got
	what="asyncio echo of $mib MiB ($(describe "$mode"))"
	serve "echo-$mode" "$mode" "$py" -u "$tmp/server.py" @PORT@ || return
	client "$mode" 120 "$py" -u "$tmp/client.py" "$port" $((mib << 20)) \
		>"$tmp/client.out" 2>"$tmp/client.err"
	if [ $rc = 124 ]; then
		fail "$what: the client hung (killed after 120 s): both ends blocked writing?"
	elif [ $rc != 0 ]; then
		fail "$what: the client exited with $rc: $(other_lines "$tmp/client.err" | tail -n 5)"
	else
		read -r _ sent _ got _ extra <"$tmp/client.out"
		[ -n "$sent" ] && [ "$sent" = "$got" ] && [ "$extra" = 0 ] ||
			fail "$what: the echo differs: $(cat "$tmp/client.out")"
	fi
	no_ferry_errors "$what, client" "$tmp/client.err"
	client_transport "$what" "$mode" "$tmp/client.err"

	# Still serving: a second, small echo.
	client "$mode" 30 "$py" -u "$tmp/client.py" "$port" 1000 \
		>"$tmp/small.out" 2>"$tmp/small.err"
	read -r _ sent _ got _ <"$tmp/small.out"
	[ $rc = 0 ] && [ -n "$sent" ] && [ "$sent" = "$got" ] ||
		fail "$what: a second echo failed ($rc): $(other_lines "$tmp/small.err" | tail -n 3)"

	kill -TERM "$server_pid"
	reap "$server_pid" 30
	[ "$reaped" != 124 ] || fail "$what: the server did not end on SIGTERM"
	out=$(grep -c "^served $((mib << 20))\$" "$tmp/echo-$mode.out")
	[ "$out" = 1 ] || fail "$what: the server did not serve one connection of" \
		"$((mib << 20)) bytes: $(head -n 3 "$tmp/echo-$mode.out")"
	if grep -q Traceback "$tmp/echo-$mode.err"; then
		fail "$what: the server raised:"
		grep -A 20 Traceback "$tmp/echo-$mode.err" | head -n 40
	fi
	no_ferry_errors "$what, server" "$tmp/echo-$mode.err"
	server_transport "$what" "$mode" "$tmp/echo-$mode.err"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

for mode in $modes; do
	run "$mode"
done
finish
