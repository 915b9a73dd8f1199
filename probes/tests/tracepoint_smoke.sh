#!/bin/sh
# End-to-end check of the tracepoint provider on Debian binaries nobody here built
# (exit 77, skipped, when sqlite3 is missing). libcrossmod_probes.so is preloaded with
# CROSSMOD_PROBES_TRACE (entry and exit probes on) and its per-function call counts must
# equal crossmod-trace's (an independent driver: its own preload library and tracepoints),
# with the program's stdout, stderr and exit status identical to a plain run, and every
# exit count equal to its entry count. Then `crossmod-trace --latency` once, and entry and
# exit probes on every function of every object ('*').
# Usage: tracepoint_smoke.sh LIBCROSSMOD_PROBES CROSSMOD_TRACE SQL_WORKLOAD [PY_WORKLOAD] [KEEP_DIR]
set -eu
lib=$1 tracer=$2 sql=$3 py=${4:-} keep=${5:-}
[ -r "$lib" ] && [ -x "$tracer" ] || { echo "not built: $lib $tracer"; exit 1; }
command -v sqlite3 >/dev/null 2>&1 || exit 77
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
table() { grep -E '^ +[0-9]+ ' "$1" | awk '{print $3, $1, $2}' | sort; }

# run NAME PATTERN CMD...: plain, crossmod-trace, probes; compare. Python's call counts
# must not depend on anything but the program, so:
# - the environment is the same size in the three runs (python builds os.environ);
# - PYTHONHASHSEED is fixed (dict collisions, hence some counts, depend on the hash seed);
# - PYTHONMALLOC=malloc: pymalloc's arena map (obmalloc.c, arena_map_mark_used) calls
#   PyMem_RawCalloc for a new radix-tree node whenever an arena lands in an address range
#   no earlier arena used, so with ASLR that count varies from run to run (3 or 4 for this
#   workload, seen on an Intel guest). libc malloc has no such state.
pyenv='PYTHONHASHSEED=0 PYTHONMALLOC=malloc'
run() {
  name=$1 pat=$2; shift 2
  set +e
  env -i PATH=/usr/bin:/bin HOME=/tmp $pyenv A=1 B=1 C=1 D=1 "$@" < "$dir/in" > "$dir/$name.plain.out" 2> "$dir/$name.plain.err"
  rc_plain=$?
  env -i PATH=/usr/bin:/bin HOME=/tmp $pyenv A=1 B=1 "$tracer" --functions "$pat" --out "$dir/$name.trace.txt" -- "$@" \
    < "$dir/in" > "$dir/$name.trace.out" 2> "$dir/$name.trace.err"
  rc_trace=$?
  env -i PATH=/usr/bin:/bin HOME=/tmp $pyenv CROSSMOD_PROBES_TRACE="$pat" CROSSMOD_PROBES_TRACE_EXIT=1 \
    CROSSMOD_PROBES_OUT="$dir/$name.probes.txt" LD_PRELOAD="$lib" "$@" \
    < "$dir/in" > "$dir/$name.probes.out" 2> "$dir/$name.probes.err"
  rc_probes=$?
  set -e
  [ "$rc_plain" -eq "$rc_probes" ] && [ "$rc_plain" -eq "$rc_trace" ] \
    || { echo "$name: exit status $rc_plain / trace $rc_trace / probes $rc_probes"; exit 1; }
  for s in out err; do
    cmp "$dir/$name.plain.$s" "$dir/$name.probes.$s" || { echo "$name: std$s differs"; exit 1; }
  done
  table "$dir/$name.trace.txt" > "$dir/$name.a"
  table "$dir/$name.probes.txt" > "$dir/$name.b"
  [ -s "$dir/$name.a" ] || { echo "$name: crossmod-trace counted nothing"; exit 1; }
  diff "$dir/$name.a" "$dir/$name.b" || { echo "$name: counts differ (crossmod-trace < > probes)"; exit 1; }
  # Columns: calls mode function object exits mean_ticks.
  awk -v n="$name" 'NF >= 6 && $1 ~ /^[0-9]+$/ && $1 != $5 { print n ": exits " $5 " != calls " $1 " for " $3; bad = 1 }
                    NF == 4 && $1 ~ /^[0-9]+$/ { print n ": no exits for " $3; bad = 1 }
                    END { exit bad }' "$dir/$name.probes.txt"
  echo "$name: $(wc -l < "$dir/$name.a") functions with equal counts; $(head -2 "$dir/$name.probes.txt" | tail -1)"
  if [ -n "$keep" ]; then
    mkdir -p "$keep"
    cp "$dir/$name.probes.txt" "$keep/$name-probes-trace.txt"
    cp "$dir/$name.trace.txt" "$keep/$name-crossmod-trace.txt"
  fi
}

# every NAME CMD...: entry and exit probes on EVERY function of every loaded object
# (libc, libm, the dynamic loader's excepted...); output and exit status must not change.
every() {
  name=$1; shift
  set +e
  env -i PATH=/usr/bin:/bin HOME=/tmp $pyenv CROSSMOD_PROBES_TRACE='*' CROSSMOD_PROBES_TRACE_EXIT=1 \
    CROSSMOD_PROBES_OUT="$dir/$name.every.txt" LD_PRELOAD="$lib" "$@" \
    < "$dir/in" > "$dir/$name.every.out" 2> "$dir/$name.every.err"
  rc=$?
  set -e
  [ "$rc" -eq "$rc_plain" ] || { echo "$name '*': exit status $rc_plain vs $rc"; exit 1; }
  cmp "$dir/$name.plain.out" "$dir/$name.every.out" || { echo "$name '*': stdout differs"; exit 1; }
  echo "$name '*': $(sed -n 2p "$dir/$name.every.txt")"
  [ -z "$keep" ] || cp "$dir/$name.every.txt" "$keep/$name-every-function.txt"
}

cp "$sql" "$dir/in"
run sqlite3 'sqlite3_*' sqlite3 :memory:
every sqlite3 sqlite3 :memory:
# crossmod-trace --latency: the same library through the launcher; output unchanged, and
# a mean time per call for sqlite3_step.
set +e
"$tracer" --latency --functions 'sqlite3_*' --out "$dir/lat.txt" -- sqlite3 :memory: \
  < "$dir/in" > "$dir/lat.out" 2> "$dir/lat.err"
rc=$?
set -e
[ "$rc" -eq "$rc_plain" ] || { echo "--latency: exit status $rc_plain vs $rc"; exit 1; }
cmp "$dir/sqlite3.plain.out" "$dir/lat.out" || { echo "--latency: stdout differs"; exit 1; }
grep -Eq '^ +[0-9]+ +jump +sqlite3_step .* [0-9]+ [0-9.]+ [0-9.]+$' "$dir/lat.txt" \
  || { cat "$dir/lat.txt"; echo "--latency: no mean time for sqlite3_step"; exit 1; }
echo "crossmod-trace --latency: $(grep -E ' sqlite3_step ' "$dir/lat.txt")"

if [ -n "$py" ] && [ -x /usr/bin/python3 ]; then
  : > "$dir/in"
  run python3 'Py*' /usr/bin/python3 "$py"
  every python3 /usr/bin/python3 "$py"
fi
echo ok
