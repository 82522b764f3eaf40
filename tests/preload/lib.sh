# lib.sh - what the preload integration scripts (tests/preload/*.sh) share.
# Sourced, not run.  The scripts run from the top of the build directory, as
# automake's test driver starts them; each sets $prog before sourcing this.
#
# A run has a MODE that says which ends are under the preload:
#   tcp    neither (the reference: plain kernel TCP)
#   ferry  both (the connection should go over ferry)
#   srv    only the server (mixed: the client is plain, so TCP)
#   cli    only the client (mixed: the server is plain, so TCP)
# shellcheck shell=bash disable=SC2034,SC2317

: "${prog:?tests/preload/lib.sh: set prog before sourcing it}"
builddir=$PWD
# The modes every script runs, in order; FERRY_TEST_MODES="ferry" (say)
# narrows a run down while chasing a failure.
modes=${FERRY_TEST_MODES:-tcp ferry srv cli}
preload_so=$builddir/preload/.libs/libferry-preload.so
failed=0

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=$((failed + 1)); }
note() { echo "$prog: $*"; }

# finish: the last line and the exit status automake reads.
finish() {
	if [ "$failed" = 0 ]; then
		echo "$prog: PASS"
		exit 0
	fi
	echo "$prog: $failed failures"
	exit 1
}

# need PROGRAM...: skip unless every PROGRAM is on the PATH.
need() {
	local p
	for p in "$@"; do
		command -v "$p" >/dev/null ||
			skip "$p is not installed (Debian: see PACKAGES in setup.sh)"
	done
}

[ -f "$preload_so" ] || skip "the preload shim is not built ($preload_so)"
# An ASan-built shim loads only behind the ASan runtime, and these programs
# (redis with its jemalloc, python3, ...) were not built for one; the plain
# build runs these scripts, tests/check_preload.sh covers the shim under ASan.
if ldd "$preload_so" 2>/dev/null | grep -q libasan; then
	skip "the shim is built with ASan; real programs run under the plain build's"
fi
need ss timeout setsid

# ferry_prefix: set the array $wrap to the command prefix that runs a
# program under the preload.  The one place that knows how: ferry-run when
# it is built (told to load this build's shim, not an installed one),
# LD_PRELOAD by hand otherwise.  FERRY_LOG=debug makes the shim say, for
# each connect() and listen(), whether ferry took it (once per connection,
# not per call); its lines go to the program's stderr.  The level is
# $ferry_log, whatever FERRY_LOG the caller has: the checks read the log.
# Neither the caller's switches nor a system ferry.conf may keep ferry off.
ferry_log=debug
ferry_prefix() {
	local hermetic=(env -u FERRY_PRELOAD -u FERRY_EXCLUDE_PORTS -u FERRY_EXCLUDE_PROGRAMS
			FERRY_CONF= "FERRY_LOG=$ferry_log")
	if [ -x "$builddir/tools/ferry-run" ]; then
		wrap=("${hermetic[@]}" "FERRY_PRELOAD_LIB=$preload_so" "$builddir/tools/ferry-run")
	else
		wrap=("${hermetic[@]}" "LD_PRELOAD=$preload_so")
	fi
}

# wrap_for MODE SIDE: set $wrap to the prefix for SIDE (server or client)
# of a MODE run: the preload's, or nothing.
wrap_for() {
	case $1/$2 in
	ferry/*|srv/server|cli/client) ferry_prefix ;;
	tcp/*|srv/client|cli/server) wrap=() ;;
	*) echo "$prog: wrap_for: bad mode/side '$1/$2'" >&2; exit 99 ;;
	esac
}

# describe MODE: what a MODE run is, for messages.
describe() {
	case $1 in
	tcp) echo "plain TCP" ;;
	ferry) echo "both ends under the preload" ;;
	srv) echo "server under the preload, client plain" ;;
	cli) echo "client under the preload, server plain" ;;
	esac
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-$prog.XXXXXX")
pids=()
cleanup() {
	local pid live
	# Only those not reaped yet: a reaped pid may be someone else's by now.
	live=" $(jobs -p | tr '\n' ' ') "
	for pid in "${pids[@]}"; do
		[[ $live == *" $pid "* ]] && slay "$pid"
	done
	exec 3>&- 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# slay PID: SIGKILL to PID's process group: PID and whatever it forked
# (a forking server's children too, hung ones included).
slay() {
	kill -9 -- "-$1" 2>/dev/null || kill -9 "$1" 2>/dev/null
}

# spawn OUT ERR COMMAND...: COMMAND in the background, in a process group
# of its own (setsid, which execs: $spawned is COMMAND's own pid and its
# group's id), and a watchdog that kills the group after 300 s so that
# nothing outlives a hung test.
spawn() {
	local out=$1 err=$2
	shift 2
	( exec setsid "$@" ) >"$out" 2>"$err" &
	spawned=$!
	pids+=("$spawned")
	(timeout 300 tail --pid="$spawned" -f /dev/null || kill -9 -- "-$spawned") \
		>/dev/null 2>&1 &
}

# reap PID SECONDS: wait for the background PID; its exit status in $reaped,
# or 124 (and PID killed) when it is still running after SECONDS: a hang.
reap() {
	local pid=$1 secs=$2
	if ! timeout "$secs" tail --pid="$pid" -f /dev/null 2>/dev/null; then
		slay "$pid"
		wait "$pid" 2>/dev/null
		reaped=124
		return
	fi
	wait "$pid"
	reaped=$?
}

# shellcheck source=tests/port-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../port-lib.sh"	# pick_port

# listening PID PORT: PID has a TCP socket listening on PORT (ss -p names
# its owners).
listening() {
	ss -Hltnp "sport = :$2" 2>/dev/null | grep -q "pid=$1,"
}

# ready PID PORT ERR PRELOADED: the server PID listens on PORT, and if it
# runs under the preload (PRELOADED=yes) the shim is done with its listen():
# it logs the outcome (to ERR) once the ferry listener beside the kernel's
# is up, or it has decided against one.  The kernel socket listens first,
# so a client that came before would find no ferry listener, and go TCP.
ready() {
	listening "$1" "$2" || return 1
	[ "$4" = yes ] || return 0
	grep -Eq "^ferry\[[0-9]+\]: (debug|info): listen on 127\.0\.0\.1:$2: " "$3"
}

# serve NAME MODE COMMAND...: start a server (the server side of a MODE
# run) whose arguments may hold @PORT@, on a fresh port; when it listens,
# its pid is in $server_pid and the port in $port, its output in
# $tmp/NAME.out and $tmp/NAME.err (also in $server_err).  A port someone took in between is
# tried again on another; returns 1 (after fail) when the server does not
# come up.
serve() {
	local name=$1 mode=$2 try i preloaded=no
	shift 2
	wrap_for "$mode" server
	[ ${#wrap[@]} = 0 ] || preloaded=yes
	server_err=$tmp/$name.err
	for try in 1 2 3 4 5; do
		port=$(pick_port)
		spawn "$tmp/$name.out" "$tmp/$name.err" "${wrap[@]}" "${@//@PORT@/$port}"
		server_pid=$spawned
		for i in $(seq 400); do
			ready "$server_pid" "$port" "$tmp/$name.err" "$preloaded" && return 0
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.05
		done
		slay "$server_pid"
		wait "$server_pid" 2>/dev/null
		grep -qi 'in use' "$tmp/$name.out" "$tmp/$name.err" || break
	done
	fail "$name ($(describe "$mode")) did not start listening (under the preload: or" \
		"the shim logged no 'listen on 127.0.0.1:$port: ...'); it said:"
	cat "$tmp/$name.out" "$tmp/$name.err"
	return 1
}

# client MODE SECONDS COMMAND...: run the client side of a MODE run in the
# foreground, limited to SECONDS; its status in $rc (124: it hung).
client() {
	local mode=$1 secs=$2
	shift 2
	wrap_for "$mode" client
	timeout -k 5 "$secs" "${wrap[@]}" "$@"
	rc=$?
}

# ferry_lines FILE: the lines the shim (libferry) logged in FILE.
ferry_lines() {
	grep -E '^ferry\[[0-9]+\]: (error|warn|info|debug): ' "$1"
}

# other_lines FILE: every line of FILE but the shim's.
other_lines() {
	grep -Ev '^ferry\[[0-9]+\]: (error|warn|info|debug): ' "$1"
}

# no_ferry_errors WHAT FILE: fail when the shim logged an error in FILE.
no_ferry_errors() {
	if grep -Eq '^ferry\[[0-9]+\]: error: ' "$2"; then
		fail "$1: the shim logged errors:"
		grep -E '^ferry\[[0-9]+\]: error: ' "$2" | head -n 20
	fi
}

# sha FILE: its sha256.
sha() { sha256sum "$1" | cut -d' ' -f1; }

# how_changed WANT GOT: how file GOT differs from WANT, for a failure
# message: sizes, how many bytes differ, the first and last differing
# offsets (0-based, hex too: ring positions show in the low bits) and how
# many bad bytes are zeros.  A corruption seen once in hundreds of runs
# needs its shape in the log.
how_changed() {
	local want=$1 got=$2
	[ -f "$got" ] || { echo "nothing arrived"; return; }
	echo "want $(stat -c %s "$want") bytes, got $(stat -c %s "$got");" \
		"$(cmp -l "$want" "$got" 2>/dev/null | awk '
			{ n++; off = $1 - 1; if (n == 1) first = off; last = off
			  if ($3 == 0) zero++
			  if (off != prev + 1) runs++; prev = off }
			END { if (!n) { print "no byte differs in the common length"; exit }
			      printf "%d bytes differ (%d zero) in %d runs, first at %d (0x%x), last at %d (0x%x)",
				     n, zero, runs, first, first, last, last }')"
}

# random_file PATH MiB: MiB of random bytes.
random_file() {
	head -c "$(( $2 * 1048576 ))" /dev/urandom >"$1"
}

# The real python3, not a version manager's wrapper script, so that the pid
# we start is the interpreter's.
python3_bin() {
	python3 -c 'import sys; print(sys.executable)'
}

# What the shim logs (preload/sockets.c) about the port of a run:
#   debug: connect to 127.0.0.1:PORT: ferry                  over ferry
#   info:  connect to 127.0.0.1:PORT: not ferry (why): TCP   fell back
#          (why: ferry-stat -s's reason, then the error if a connect failed:
#          "no-ferry-listener", "timeout: Connection timed out", ...)
#   info:  listen on 127.0.0.1:PORT: TCP and ferry           both served
# ferry-stat -s counts the same per process (tests/ferry-stat-why.sh).

# client_transport WHAT MODE FILES...: the stderr FILES of a run's clients
# say that each connection went over ferry when both ends are under the
# preload, and over TCP when only the client is; plain clients log nothing.
client_transport() {
	local what=$1 mode=$2 via_ferry via_tcp
	shift 2
	case $mode in ferry|cli) ;; *) return 0 ;; esac
	via_ferry=$(cat "$@" | grep -Ec "^ferry\[[0-9]+\]: debug: connect to 127\.0\.0\.1:$port: ferry\$")
	via_tcp=$(cat "$@" | grep -Ec "^ferry\[[0-9]+\]: info: connect to 127\.0\.0\.1:$port: .*: TCP\$")
	if [ "$mode" = ferry ]; then
		[ "$via_ferry" -gt 0 ] && [ "$via_tcp" = 0 ] ||
			fail "$what: $via_ferry connections over ferry and $via_tcp over TCP, not all over ferry:" \
				"$(cat "$@" | grep -E "connect to 127\.0\.0\.1:$port: .*: TCP\$" | head -n 3)"
	else
		[ "$via_tcp" -gt 0 ] && [ "$via_ferry" = 0 ] ||
			fail "$what: $via_ferry connections over ferry and $via_tcp over TCP, not all over TCP"
	fi
}

# server_transport WHAT MODE FILE: the server's stderr FILE says it serves
# ferry beside TCP when it is under the preload.
server_transport() {
	case $2 in ferry|srv) ;; *) return 0 ;; esac
	grep -Eq "^ferry\[[0-9]+\]: (debug|info): listen on 127\.0\.0\.1:$port: TCP and ferry\$" "$3" ||
		fail "$1: the server does not say it serves ferry on port $port:" \
			"$(grep -E "listen on" "$3" | head -n 3)"
}
