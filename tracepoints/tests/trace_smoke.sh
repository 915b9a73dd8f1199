#!/bin/sh
# Smoke test of crossmod-trace on Debian's sqlite3 (skipped, exit 77, when absent): the
# program's stdout and exit status are unchanged, the table goes to --out, and known
# calls are counted. Usage: trace_smoke.sh TRACER [ARGS...], e.g. build/tracepoints/
# crossmod-trace, or build/crossmod trace.
set -eu
[ -x "$1" ] || { echo "tracer $1 not built"; exit 1; }
command -v sqlite3 >/dev/null 2>&1 || exit 77
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/w.sql" <<'SQL'
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM n WHERE x < 500)
INSERT INTO t SELECT x, 'v' || x FROM n;
SELECT count(*), max(b) FROM t;
SELECT nosuchcolumn FROM t;
SQL
set +e
sqlite3 :memory: < "$dir/w.sql" > "$dir/plain.out" 2> "$dir/plain.err"; plain_rc=$?
"$@" --functions 'sqlite3_*' --out "$dir/table" -- sqlite3 :memory: < "$dir/w.sql" \
  > "$dir/traced.out" 2> "$dir/traced.err"; traced_rc=$?
set -e
[ "$plain_rc" -ne 0 ] || { echo "workload should fail (exit status check)"; exit 1; }
[ "$plain_rc" -eq "$traced_rc" ] || { echo "exit $plain_rc vs $traced_rc"; exit 1; }
cmp "$dir/plain.out" "$dir/traced.out" || { echo "stdout differs"; exit 1; }
cmp "$dir/plain.err" "$dir/traced.err" || { echo "stderr differs"; exit 1; }
head -1 "$dir/table"
grep -Eq '^ +[0-9]+ +jump +sqlite3_prepare_v2 ' "$dir/table" || { cat "$dir/table"; exit 1; }
grep -q 'functions traced' "$dir/table"
# --latency (exit probes through the probe layer): output unchanged, a mean per call.
set +e
"$@" --latency --functions 'sqlite3_*' --out "$dir/lat" -- sqlite3 :memory: < "$dir/w.sql" \
  > "$dir/lat.out" 2> "$dir/lat.err"; lat_rc=$?
set -e
[ "$plain_rc" -eq "$lat_rc" ] || { echo "--latency: exit $plain_rc vs $lat_rc"; exit 1; }
cmp "$dir/plain.out" "$dir/lat.out" || { echo "--latency: stdout differs"; exit 1; }
cmp "$dir/plain.err" "$dir/lat.err" || { echo "--latency: stderr differs"; exit 1; }
grep -Eq '^ +[0-9]+ +jump +sqlite3_prepare_v2 .* [0-9]+ [0-9.]+ [0-9.]+$' "$dir/lat" \
  || { cat "$dir/lat"; echo "--latency: no mean time for sqlite3_prepare_v2"; exit 1; }
echo ok
