#!/bin/sh
# check_preload.sh - tests/preload_semantics under the preload shim: what a
# plain BSD-sockets program sees of ferry connections (epoll, poll, select,
# non-blocking connect, fallback to TCP, dup, fork, EPIPE).
shim=preload/.libs/libferry-preload.so
if [ ! -e "$shim" ]; then
	echo "check_preload.sh: SKIP: $shim not built" >&2
	exit 77
fi
preload="$PWD/$shim"
# A shim built with the sanitizers needs their runtime loaded before it.
asan=$(ldd "$shim" 2>/dev/null | awk '/libasan/ { print $3 }')
[ -n "$asan" ] && preload="$asan:$preload"
LD_PRELOAD="$preload" exec timeout 300 ./tests/preload_semantics "$@"
