#!/usr/bin/env bash
# nginx.sh - nginx with a master and two workers under the preload, whose
# listening socket the master makes and the workers accept from: with
# accept_mutex off (EPOLLEXCLUSIVE), on, and with "listen ... reuseport"
# (a SO_REUSEPORT group, a socket per worker).  Every run, clients under
# the preload must go over ferry (their log says so, connection by
# connection):
#   curl       requests answered 200 by a worker (the body is its pid);
#              with reuseport, by both workers (clients spread over the
#              group's members);
#   wrk        keep-alive and "Connection: close" load: no socket error,
#              no non-2xx answer;
#   kill       the worker that answered last is killed (SIGKILL): the
#              next requests are answered all the same;
#   reload     nginx -s reload while wrk runs (close mode: a new
#              connection per request): no request fails;
#   plain      a curl without the preload: TCP, on the same port.
# Both ends under the preload only: the mixed modes are http.sh's.
set -u
prog=nginx.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
# Listeners shared by fork are not the shim's default yet (ferry-run(1)).
export FERRY_SHARE_LISTENERS=1
need nginx curl wrk

# Workers may run as another user (nobody, under root): /pid needs no file.
mkdir -p "$tmp/www"
printf 'ferry says hello\n' >"$tmp/www/index.html"

# conf NAME PORT MUTEX REUSEPORT: an nginx.conf in $tmp/NAME/.
conf() {
	local d=$tmp/$1
	mkdir -p "$d"
	cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
pid $d/nginx.pid;
error_log stderr info;
events { worker_connections 1024; accept_mutex $3; }
http {
	access_log off;
	client_body_temp_path $d/body;
	proxy_temp_path $d/proxy;
	fastcgi_temp_path $d/fastcgi;
	uwsgi_temp_path $d/uwsgi;
	scgi_temp_path $d/scgi;
	server {
		listen 127.0.0.1:$2 $4;
		root $tmp/www;
		location /pid { return 200 "\$pid\n"; }
	}
}
EOF
}

# curl_n WHAT MODE N: N requests for /pid, each answered 200 with a pid.
curl_n() {
	local what=$1 mode=$2 n=$3 i
	: >"$tmp/pids"
	: >"$tmp/curl.err"
	for i in $(seq "$n"); do
		client "$mode" 30 curl -sS --noproxy '*' -w '%{http_code}\n' \
			"http://127.0.0.1:$port/pid" >>"$tmp/pids" 2>>"$tmp/curl.err"
		[ "$rc" = 0 ] || fail "$what: curl $i exited with $rc: $(other_lines "$tmp/curl.err" | tail -n 2)"
	done
	[ "$(grep -cx 200 "$tmp/pids")" = "$n" ] ||
		fail "$what: not every request was answered 200: $(grep -vx '[0-9]*' "$tmp/pids" | head -n 3)"
	no_ferry_errors "$what" "$tmp/curl.err"
	client_transport "$what" "$mode" "$tmp/curl.err"
	last_pid=$(grep -E '^[0-9]+$' "$tmp/pids" | grep -vx 200 | tail -n 1)
}

# wrk_check WHAT OUT ERR: wrk's report says no socket error, no non-2xx,
# and requests were made; its connections went over ferry.
# wrk_check WHAT OUT ERR [reload]: every request answered, none failed,
# every connection over ferry -- or, across a reload, all but one in a
# thousand: a connect that meets the old workers going waits the shim's
# bound for an answer and is then served over TCP, as the kernel would
# serve it (lost: none; slower: that one).
wrk_check() {
	local what=$1 out=$2 err=$3 reload=${4:-} via_ferry via_tcp
	[ "$rc" = 0 ] || fail "$what: wrk exited with $rc: $(tail -n 3 "$err")"
	if grep -Eq 'Socket errors|Non-2xx' "$out"; then
		fail "$what: $(grep -E 'Socket errors|Non-2xx' "$out")"
	fi
	grep -Eq '^ +[1-9][0-9]* requests in' "$out" || fail "$what: wrk made no request: $(cat "$out")"
	no_ferry_errors "$what" "$err"
	if [ -z "$reload" ]; then
		client_transport "$what" ferry "$err"
		return
	fi
	via_ferry=$(grep -Ec "^ferry\[[0-9]+\]: debug: connect to 127\.0\.0\.1:$port: ferry\$" "$err")
	via_tcp=$(grep -Ec "^ferry\[[0-9]+\]: info: connect to 127\.0\.0\.1:$port: .*: TCP\$" "$err")
	[ "$via_ferry" -gt 0 ] && [ $((via_tcp * 1000)) -le "$via_ferry" ] ||
		fail "$what: $via_ferry connections over ferry and $via_tcp over TCP, more than one in a thousand over TCP"
	[ "$via_tcp" = 0 ] || note "$what: $via_tcp of $((via_ferry + via_tcp)) connections over TCP"
}

run() {
	local name=$1 mutex=$2 reuse=$3 what failed_before=$failed p workers
	what="nginx, 2 workers, accept_mutex $mutex${reuse:+, $reuse}"
	# serve picks the port; nginx reads it from its configuration, which
	# bash writes before it execs nginx (same pid, same preload).
	serve "$name" ferry bash -c '. "$1"; conf "$2" "$3" "$4" "$5";
		exec nginx -p "$6/$2" -c "$6/$2/nginx.conf"' \
		conf "$tmp/conf.sh" "$name" @PORT@ "$mutex" "$reuse" "$tmp" || return

	curl_n "$what, curl" ferry 20
	# A SO_REUSEPORT group: the kernel's pick spreads clients over its
	# members, one per worker (all 20 to one: a chance of 2^-19).
	if [ -n "$reuse" ] && [ "$(grep -vx 200 "$tmp/pids" | sort -u | wc -l)" -lt 2 ]; then
		fail "$what: every client went to one worker ($last_pid)"
	fi

	client ferry 60 wrk -t2 -c8 -d2s "http://127.0.0.1:$port/pid" >"$tmp/wrk.out" 2>"$tmp/wrk.err"
	wrk_check "$what, wrk keep-alive" "$tmp/wrk.out" "$tmp/wrk.err"
	client ferry 60 wrk -t2 -c8 -d2s -H 'Connection: close' "http://127.0.0.1:$port/pid" \
		>"$tmp/wrk.out" 2>"$tmp/wrk.err"
	wrk_check "$what, wrk close" "$tmp/wrk.out" "$tmp/wrk.err"

	# The worker that answered last dies; the master starts another.
	workers=$(pgrep -P "$server_pid" | tr '\n' ' ')
	[[ " $workers " == *" $last_pid "* ]] ||
		fail "$what: pid $last_pid answered, not a worker of $server_pid ($workers)"
	kill -9 "$last_pid"
	curl_n "$what, after worker $last_pid was killed" ferry 10

	# A reload under load: new workers take over from the old.
	wrap_for ferry client
	spawn "$tmp/wrk-reload.out" "$tmp/wrk-reload.err" "${wrap[@]}" \
		wrk -t2 -c8 -d4s -H 'Connection: close' "http://127.0.0.1:$port/pid"
	sleep 1
	nginx -p "$tmp/$name" -c "$tmp/$name/nginx.conf" -s reload 2>"$tmp/reload.err" ||
		fail "$what: nginx -s reload failed: $(cat "$tmp/reload.err")"
	reap "$spawned" 60
	rc=$reaped
	wrk_check "$what, wrk close across nginx -s reload" "$tmp/wrk-reload.out" \
		"$tmp/wrk-reload.err" reload
	curl_n "$what, after the reload" ferry 5

	curl_n "$what, a plain client" tcp 3

	kill -QUIT "$server_pid"
	reap "$server_pid" 30
	[ "$reaped" != 124 ] || fail "$what: nginx did not end on SIGQUIT"
	no_ferry_errors "$what, nginx" "$server_err"
	server_transport "$what" ferry "$server_err"
	grep -Eq "^ferry\[$server_pid\]: info: fd [0-9]+: a listener shared by fork" "$server_err" ||
		fail "$what: the master did not share its listener"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

{ echo "tmp=$tmp"; declare -f conf; } >"$tmp/conf.sh"
run mutex-off off ""
run mutex-on on ""
run reuseport off reuseport
finish
