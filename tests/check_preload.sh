#!/bin/sh
# check_preload.sh - tests/preload_semantics under the preload shim: what a
# plain BSD-sockets program sees of ferry connections (epoll, poll, select,
# non-blocking connect, fallback to TCP, dup, fork, EPIPE).
shim=preload/.libs/libferry-preload.so
if [ ! -e "$shim" ]; then
	echo "check_preload.sh: SKIP: $shim not built" >&2
	exit 77
fi
LD_PRELOAD="$PWD/$shim" exec timeout 300 ./tests/preload_semantics "$@"
