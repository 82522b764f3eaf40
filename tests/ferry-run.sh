#!/usr/bin/env bash
# ferry-run.sh - ferry-run's option handling and what the program it starts
# gets: the shim in LD_PRELOAD (appended, never twice) and really mapped,
# each option as its FERRY_* variable, errors with ferry-run's own exit
# statuses, the program's status passed through, and --help naming every
# FERRY_* variable the sources read.
set -u

prog=ferry-run.sh
run=./tools/ferry-run
shim=$PWD/preload/.libs/libferry-preload.so

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

[ -x "$run" ] || skip "$run is not built"
[ -f "$shim" ] || skip "the shim $shim is not built"
# An ASan-built shim cannot load into programs built without ASan (sh,
# python3) unless the ASan runtime is preloaded first; the plain build runs
# this script, and tests/check_preload.sh covers the shim under ASan.
ldd "$shim" 2>/dev/null | grep -q libasan &&
	skip "the shim is built with the sanitizers; the plain build runs this test"
srcdir=${srcdir:-..}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Start from an environment without ferry's variables.
while IFS= read -r v; do unset "$v"; done < <(env | sed -n 's/^\(FERRY_[A-Z0-9_]*\)=.*/\1/p')
unset LD_PRELOAD

# expect_status WANT COMMAND...: run COMMAND, its stderr in $tmp/err.
expect_status() {
	local want=$1 got
	shift
	"$@" >"$tmp/out" 2>"$tmp/err"
	got=$?
	[ "$got" = "$want" ] || fail "$* exited $got, wanted $want: $(cat "$tmp/err")"
}

# --- the preload reaches the program ---
out=$("$run" sh -c 'printf %s "$LD_PRELOAD"')
[ "$out" = "$shim" ] || fail "LD_PRELOAD in the child is '$out', wanted '$shim'"
"$run" cat /proc/self/maps > "$tmp/maps" || fail "cat under ferry-run failed"
grep -q 'libferry-preload\.so' "$tmp/maps" || fail "the shim is not mapped in the child"
out=$(LD_PRELOAD=libc.so.6 "$run" sh -c 'printf %s "$LD_PRELOAD"')
[ "$out" = "libc.so.6:$shim" ] || fail "existing LD_PRELOAD: got '$out'"
out=$(LD_PRELOAD="$shim" "$run" sh -c 'printf %s "$LD_PRELOAD"')
[ "$out" = "$shim" ] || fail "shim added twice: '$out'"
out=$(FERRY_PRELOAD_LIB="$shim" "$run" sh -c 'printf %s "$LD_PRELOAD"')
[ "$out" = "$shim" ] || fail "FERRY_PRELOAD_LIB not used: '$out'"
FERRY_PRELOAD_LIB=/nonexistent/lib.so expect_status 125 "$run" true
grep -q 'FERRY_PRELOAD_LIB=/nonexistent/lib.so' "$tmp/err" || fail "no message for a missing FERRY_PRELOAD_LIB"

# --- options become variables ---
printvars='printf "%s|" "$FERRY_RBUF" "$FERRY_SBUF" "$FERRY_LOG" "$FERRY_POLL_US" "$FERRY_PRELOAD" "$FERRY_TRANSPORT" "$FERRY_EXCLUDE_PORTS"'
out=$("$run" -r 64k -s 1M -l info -p 0 --off -t shm -x 22 sh -c "$printvars" 2> "$tmp/err")
[ "$out" = "64k|1M|info|0|off|shm|22|" ] || fail "short options gave '$out'"
# The shim in the child read them: --off and --log info together say so.
grep -q 'FERRY_PRELOAD=off: ferry is off' "$tmp/err" || fail "the shim did not report --off: $(cat "$tmp/err")"
out=$(FERRY_EXCLUDE_PORTS=80 "$run" --rbuf=65536 --sbuf=8192 --log=debug --poll-us=1000 \
      --transport=shm --exclude-port=6000-6010 sh -c "$printvars")
[ "$out" = "65536|8192|debug|1000||shm|80,6000-6010|" ] || fail "long options gave '$out'"
echo 'exclude port 1' > "$tmp/rules.conf"
out=$(cd "$tmp" && "$OLDPWD/$run" -c rules.conf sh -c 'cd / && printf %s "$FERRY_CONF"')
[ "$out" = "$tmp/rules.conf" ] || fail "--conf is not made absolute: '$out'"
# Options stop at the program: its own options are its own.
out=$("$run" sh -c 'printf %s "$1"' sh -l)
[ "$out" = "-l" ] || fail "an option after the program was taken: '$out'"
out=$("$run" -- sh -c 'printf ok')
[ "$out" = ok ] || fail "-- before the program: '$out'"

# --- errors ---
expect_status 125 "$run"
grep -q 'no program' "$tmp/err" || fail "no message without a program"
expect_status 125 "$run" -r 12q true
grep -q -- '--rbuf 12q' "$tmp/err" || fail "no message for --rbuf 12q"
expect_status 125 "$run" -s '' true
expect_status 125 "$run" -l loud true
grep -q -- '--log loud' "$tmp/err" || fail "no message for --log loud"
expect_status 125 "$run" -p -1 true
expect_status 125 "$run" -x 22/tcp true
expect_status 125 "$run" -c "$tmp/none.conf" true
grep -q "none.conf" "$tmp/err" || fail "no message for a missing --conf file"
expect_status 125 "$run" --no-such-option true
expect_status 127 "$run" /nonexistent/program
printf '#!/bin/sh\n' > "$tmp/noexec"
chmod 0644 "$tmp/noexec"
expect_status 126 "$run" "$tmp/noexec"

# --- the program's own status, and --dry-run ---
expect_status 3 "$run" sh -c 'exit 3'
expect_status 0 "$run" -n -r 64k touch "$tmp/made" "a b"
[ ! -e "$tmp/made" ] || fail "--dry-run ran the program"
grep -qx "FERRY_RBUF=64k" "$tmp/out" || fail "--dry-run did not print FERRY_RBUF: $(cat "$tmp/out")"
grep -qx "LD_PRELOAD=$shim" "$tmp/out" || fail "--dry-run did not print LD_PRELOAD"
grep -qx "touch $tmp/made 'a b'" "$tmp/out" || fail "--dry-run command line: $(tail -1 "$tmp/out")"
expect_status 0 "$run" --version
grep -q '^ferry-run (ferry) ' "$tmp/out" || fail "--version: $(cat "$tmp/out")"

# --- --help names every FERRY_* variable the library, CM and shim read ---
expect_status 0 "$run" --help
grep -q '^Usage: ferry-run' "$tmp/out" || fail "--help has no usage line"
vars=$(grep -rhoE 'getenv\("FERRY_[A-Z0-9_]+"\)' "$srcdir/lib" "$srcdir/cm" "$srcdir/preload" \
       "$srcdir/tools/ferry-run.c" "$srcdir/tools/shim_find.c" | sed 's/getenv("\(.*\)")/\1/' | sort -u)
[ -n "$vars" ] || fail "found no getenv(\"FERRY_...\") in $srcdir"
for v in $vars; do
	grep -q "^  $v " "$tmp/out" || fail "--help does not list $v"
done

[ $failed = 0 ] && echo "$prog: PASS"
exit $failed
