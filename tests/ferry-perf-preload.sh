#!/usr/bin/env bash
# ferry-perf-preload.sh - ferry-perf's tcp+preload stream rows: the tcp code
# run under the shim really goes over ferry (rows with figures, beside tcp
# rows, and the ratio lines); a shim that stays off makes the rows skip with
# "fell back to kernel TCP" instead of reporting TCP figures; a missing
# shim is said in a note and leaves no rows; the hidden worker mode refuses
# a bad channel.
set -u

prog=ferry-perf-preload.sh
perf=./tools/ferry-perf
shim=$PWD/preload/.libs/libferry-preload.so

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

[ -x "$perf" ] || skip "$perf is not built"
[ -f "$shim" ] || skip "the shim $shim is not built"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
while IFS= read -r v; do unset "$v"; done < <(env | sed -n 's/^\(FERRY_[A-Z0-9_]*\)=.*/\1/p')
unset LD_PRELOAD

# Short rows: a few hundred round trips, 0.1 s streams, 0.2 s of connects.
short=(--local -o stream -n 300 -D 0.1 --timeout 60 --json)

# rows FILE TEST MODE: the tcp+preload JSON rows of TEST and MODE in FILE.
rows() { grep "\"test\":\"$2\",\"op\":\"stream\",\"transport\":\"tcp+preload\",\"mode\":\"$3\"" "$1"; }

# --- under the shim: every row measured, over ferry ---
timeout 120 "$perf" "${short[@]}" -T tcp,tcp+preload >"$tmp/on" 2>"$tmp/err" ||
	fail "ferry-perf -T tcp,tcp+preload failed: $(cat "$tmp/err")"
grep -q "\"transport\":\"tcp+preload\",\"note\":\".*LD_PRELOAD=$shim\"" "$tmp/on" ||
	fail "no note naming the shim: $(head -3 "$tmp/on")"
for tm in lat:busy lat:block bw:block rate:block connect:block; do
	t=${tm%:*} m=${tm#*:}
	r=$(rows "$tmp/on" "$t" "$m")
	[ -n "$r" ] || { fail "no tcp+preload $t $m row"; continue; }
	case $r in *'"skipped"'*) fail "tcp+preload $t $m skipped: $r" ;; esac
	case $t in
	lat) echo "$r" | grep -q '"rtt_us_p50":[0-9]' || fail "lat row without rtt: $r" ;;
	bw|rate) echo "$r" | grep -q '"gbit_s":[0-9]' || fail "$t row without gbit_s: $r" ;;
	connect) echo "$r" | grep -q '"conn_s":[1-9]' || fail "connect row without conn_s: $r" ;;
	esac
done
grep -q '"name":"preload_bw_per_tcp_bw".*"value":[0-9]' "$tmp/on" ||
	fail "no tcp+preload / tcp bandwidth ratio: $(grep ratio "$tmp/on")"

# --- the shim loaded but off: the connections are TCP, the rows skip ---
FERRY_PRELOAD=off timeout 120 "$perf" "${short[@]}" -T tcp+preload -t lat,connect \
	>"$tmp/off" 2>"$tmp/err" || fail "ferry-perf with FERRY_PRELOAD=off failed: $(cat "$tmp/err")"
n=$(grep -c '"transport":"tcp+preload","mode".*"skipped":"skipped: fell back to kernel TCP' "$tmp/off")
[ "$n" = 3 ] || fail "FERRY_PRELOAD=off: $n of 3 rows say they fell back: $(cat "$tmp/off")"
! grep -q '"transport":"tcp+preload".*"rtt_us_p50"' "$tmp/off" ||
	fail "FERRY_PRELOAD=off: TCP figures reported as tcp+preload"

# --- no shim: a note, no rows, the other rows still run ---
FERRY_PRELOAD_LIB=/nonexistent/libferry-preload.so timeout 120 "$perf" "${short[@]}" \
	-T tcp,tcp+preload -t lat >"$tmp/none" 2>"$tmp/err" ||
	fail "ferry-perf without the shim failed: $(cat "$tmp/err")"
grep -q '"transport":"tcp+preload","note":"skipped: FERRY_PRELOAD_LIB=/nonexistent' "$tmp/none" ||
	fail "no note for a missing shim: $(cat "$tmp/none")"
! grep -q '"transport":"tcp+preload","mode"' "$tmp/none" || fail "rows without a shim"
grep -q '"transport":"tcp","mode":"busy"' "$tmp/none" || fail "the tcp rows did not run"

# --- the hidden worker mode wants an open channel ---
timeout 10 "$perf" --stream-worker client 999 >/dev/null 2>"$tmp/err"
[ $? = 1 ] || fail "--stream-worker with a closed fd did not exit 1"
grep -q "not an open channel" "$tmp/err" || fail "--stream-worker: $(cat "$tmp/err")"

[ $failed = 0 ] && echo "$prog: PASS"
exit $failed
