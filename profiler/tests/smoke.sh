#!/bin/sh
# Smoke: `crossmod profile` on the cyg test program; the report exists, lists leaf_a, the
# program's stdout is its own, and its exit status is kept.
#   smoke.sh CROSSMOD PROGRAM OUTDIR
set -eu
crossmod=$1 prog=$2 out=$3
rm -rf "$out"
stdout=$("$crossmod" profile --quiet --policy paper --out "$out" -- "$prog" 2 2000)
printf '%s\n' "$stdout" | grep -qx 'leaf_a 4000'
[ "$(printf '%s\n' "$stdout" | wc -l)" -eq 2 ]
grep -q '"name": "(anonymous namespace)::leaf_a(unsigned int)"' "$out/profile.json"
grep -q 'leaf_a' "$out/profile.csv"
rc=0
"$crossmod" profile --quiet --policy full --out "$out-_exit" -- "$prog" 2 100 _exit >/dev/null || rc=$?
[ "$rc" -eq 3 ]
rm -rf "$out-_exit"
echo ok
