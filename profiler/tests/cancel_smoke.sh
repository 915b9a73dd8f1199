#!/bin/sh
# Smoke: threads cancelled inside probed frames under `crossmod profile --policy full`
# (cancel_prog.cpp): with -finstrument-functions, with -fpatchable-function-entry (exit
# probes redirect return addresses) and plainly built through --trace (tracepoints, the
# same). The program checks that every destructor ran; the profile must be written with
# its exit status 0.
#   cancel_smoke.sh CROSSMOD CYG_PROG PFE_PROG PLAIN_PROG OUTDIR
set -eu
crossmod=$1 cyg=$2 pfe=$3 plain=$4 out=$5
rm -rf "$out"
mkdir -p "$out"
"$plain" 4 >"$out/plain.txt"
run() {  # run NAME PROGRAM [profile options]
  name=$1 prog=$2
  shift 2
  "$crossmod" profile --quiet --policy full "$@" --out "$out/$name" -- "$prog" 4 >"$out/$name.txt"
  cat "$out/$name.txt"
  python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['exit']['kind'] == 'exit' and j['exit']['status'] == 0, j['exit']
fs = {f['name']: f for f in j['functions']}
leaf = fs['cancel_leaf']
assert leaf['calls_observed'] > 0 and leaf['samples'] > 0, leaf
# GCC's .cold fragments (the cleanup pads here) are jumped into, never called: not traced.
assert not any('.cold' in n for n in fs), sorted(fs)
" "$out/$name/profile.json"
}
# The plain build has .cold fragments for --trace 'cancel_*' to leave alone.
nm "$plain" | grep -q 'cancel_.*\.cold' 
run cyg "$cyg"
run pfe "$pfe"
run trace "$plain" --trace 'cancel_*'
echo ok
