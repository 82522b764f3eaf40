#!/bin/bash
# libferry.so exports exactly the functions its public headers declare:
# nothing internal leaks, nothing public is missing.
set -euo pipefail
top=${srcdir:-.}
lib=.libs/libferry.so
[ -f "$lib" ] || { echo "check_symbols: $lib not built"; exit 1; }
command -v nm >/dev/null || { echo "check_symbols: SKIP: nm is not installed"; exit 77; }
declared=$(grep -ohE '\bferry_[a-z0-9_]+\(' "$top"/include/ferry/*.h | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRWV]$/ {print $3}' | sort -u)
listed=$(sort -u "$top/lib/libferry.sym")
status=0
if [ "$declared" != "$listed" ]; then
	echo "check_symbols: lib/libferry.sym differs from the headers:"
	diff <(echo "$declared") <(echo "$listed") || true
	status=1
fi
if [ "$declared" != "$exported" ]; then
	echo "check_symbols: exported symbols differ from the headers (< declared, > exported):"
	diff <(echo "$declared") <(echo "$exported") || true
	status=1
fi
[ $status = 0 ] && echo "check_symbols: $(echo "$declared" | wc -l) public symbols, all exported, nothing else"
exit $status
