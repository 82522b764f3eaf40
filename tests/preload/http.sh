#!/usr/bin/env bash
# http.sh - curl fetching a 100 MiB file of random bytes from python3's
# http.server: plain TCP, both ends under the preload, and each end alone
# under it (mixed: still works, over TCP).  Every run: curl exits 0 with
# HTTP 200, the file arrives whole (its size and sha256 are the
# original's), the server logged one GET answered 200 and no traceback,
# and it is still serving afterwards (a second, small file).
set -u
prog=http.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need curl python3
py=$(python3_bin)

mkdir -p "$tmp/www"
random_file "$tmp/www/blob" 100
printf 'ferry says hello\n' >"$tmp/www/small.txt"
want=$(sha "$tmp/www/blob")
size=$(stat -c %s "$tmp/www/blob")

run() {
	local mode=$1 what failed_before=$failed got
	what="curl from http.server ($(describe "$mode"))"
	# -u: unbuffered, so that its log is in the file when we read it.
	serve "http-$mode" "$mode" "$py" -u -m http.server --bind 127.0.0.1 \
		--directory "$tmp/www" @PORT@ || return
	client "$mode" 120 curl -sS --noproxy '*' -o "$tmp/got" \
		-w '%{http_code} %{size_download}\n' "http://127.0.0.1:$port/blob" \
		>"$tmp/curl.out" 2>"$tmp/curl.err"
	[ $rc = 0 ] || fail "$what: curl exited with $rc: $(other_lines "$tmp/curl.err")"
	got=$(cat "$tmp/curl.out")
	[ "$got" = "200 $size" ] || fail "$what: curl says '$got', not '200 $size'"
	[ -f "$tmp/got" ] && [ "$(sha "$tmp/got")" = "$want" ] ||
		fail "$what: the file arrived changed: $(how_changed "$tmp/www/blob" "$tmp/got")"
	no_ferry_errors "$what, curl" "$tmp/curl.err"
	client_transport "$what" "$mode" "$tmp/curl.err"
	rm -f "$tmp/got"

	client "$mode" 30 curl -sS --noproxy '*' "http://127.0.0.1:$port/small.txt" \
		>"$tmp/small.out" 2>"$tmp/curl.err"
	[ $rc = 0 ] && cmp -s "$tmp/small.out" "$tmp/www/small.txt" ||
		fail "$what: a second request failed ($rc): $(other_lines "$tmp/curl.err")"

	kill -TERM "$server_pid"
	reap "$server_pid" 30
	[ "$reaped" != 124 ] || fail "$what: the server did not end on SIGTERM"
	[ "$(grep -c '"GET /blob HTTP/1.1" 200 -' "$tmp/http-$mode.err")" = 1 ] ||
		fail "$what: the server did not log one GET /blob answered 200:" \
			"$(other_lines "$tmp/http-$mode.err" | head -n 5)"
	if grep -q Traceback "$tmp/http-$mode.err"; then
		fail "$what: the server raised:"
		grep -A 20 Traceback "$tmp/http-$mode.err" | head -n 40
	fi
	no_ferry_errors "$what, http.server" "$tmp/http-$mode.err"
	server_transport "$what" "$mode" "$tmp/http-$mode.err"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

for mode in $modes; do
	run "$mode"
done
finish
