#!/usr/bin/env bash
# fuzz-one.sh <package> <target> <fuzztime>: runs one fuzz target with one fuzzing
# worker (go tool task fuzz runs two of these at a time: each run spends most of its
# first seconds starting its workers and gathering baseline coverage, which the other
# run's fuzzing overlaps; 6 targets took 59 s one after another, 30 s two at a time).
#
# Go 1.26's fuzz coordinator can fail a run at the -fuzztime deadline with a bare
# "context deadline exceeded" and no failing input (go.dev/issue/75804, fixed in
# Go 1.27): such a run is retried once; anything else fails, printing the run's output.
set -u
pkg=$1 target=$2 fuzztime=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "fuzz $pkg $target ($fuzztime)"
for attempt in 1 2; do
  if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -parallel=1 "$pkg" >"$log" 2>&1; then
    exit 0
  fi
  if [ $attempt = 1 ] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
    echo "  $target: the fuzz coordinator's deadline race (go.dev/issue/75804), no failing input: running it again"
    continue
  fi
  echo "FAIL: fuzz $pkg $target"
  cat "$log"
  exit 1
done
