# port-lib.sh - a free TCP port for a test's server.  Sourced (bash) by
# tests/preload/lib.sh and the ping-pong scripts (pingpong.sh
# and ud-pingpong.sh).
# shellcheck shell=bash

# pick_port: a random port below the kernel's ephemeral ones (where the
# local end of some other test's connection may sit at any moment) that no
# TCP socket here uses.
pick_port() {
	local p low _
	read -r low _ < /proc/sys/net/ipv4/ip_local_port_range || low=32768
	[ "$low" -gt 12000 ] || low=61000
	while :; do
		p=$(( 10000 + (RANDOM * 32768 + RANDOM) % (low - 10000) ))
		ss -Htan "( sport = :$p or dport = :$p )" | grep -q . || break
	done
	echo "$p"
}
