#!/bin/sh
# N commands (argv[1], default 30), each a pipeline of two: a shell forking and exec'ing
# as shells do, for what `crossmod profile` costs a program made of many short images
# (profiler/README.md, Crash-proof data path).
n=${1:-30}
i=0
while [ "$i" -lt "$n" ]; do
  echo "$i" | cat > /dev/null
  i=$((i + 1))
done
