#!/usr/bin/env bash
# Races the log from outside the process with wrk (Debian's package): RUNS runs of
# DURATION at each connection count in CONNS, a unique leaf per request, and prints
# appends/s, p50, p99 and the server's CPU per 1,000 appends (utime+stime of the
# server process from /proc, over the run).
#
#   go tool task bench:race                      # svc log, POST /append (answers with proofs)
#   ROUTE=add go tool task bench:race            # svc log, POST /add (index line + proof)
#   TESSERA_POSIX=/tmp/tessera/posix go tool task bench:race
#       also runs Tessera's POSIX conformance server (built outside the repository)
#       and alternates it with ours, run by run, wrk on its POST /add.
#   B_FLAGS=--metrics=false go tool task bench:race
#       also runs a second svc log with these extra flags and alternates the two run by
#       run (the telemetry overhead: docs/design/telemetry.md).
#   SVC_BASE=/tmp/svc-main go tool task bench:race
#       also runs the svc log built from another checkout (a baseline revision, e.g.
#       `git archive main | tar -x -C /tmp/svc-main`), alternated run by run.
#
# Environment: CONNS (default "64 256"), RUNS (3), DURATION (15s), ROUTE (append|add),
# TESSERA_POSIX (path to Tessera's cmd/conformance/posix binary), SVC_BASE (a checkout
# of a baseline revision), WORK (a scratch
# directory; default a fresh one under /tmp, removed at the end unless KEEP=1).
set -euo pipefail

CONNS=${CONNS:-"64 256"}
RUNS=${RUNS:-3}
DURATION=${DURATION:-15s}
ROUTE=${ROUTE:-append}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LUA="$ROOT/bench/race/add.lua"
WORK=${WORK:-$(mktemp -d /tmp/svc-race.XXXXXX)}
mkdir -p "$WORK"
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk (Debian's package)" >&2; exit 1; }

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

echo "building svc into $WORK" >&2
(cd "$ROOT" && go build -o "$WORK/svc" ./cmd/svc && go build -o "$WORK/notekey" ./bench/race/notekey)
if [ -n "${SVC_BASE:-}" ]; then (cd "$SVC_BASE" && go build -o "$WORK/svc-base" ./cmd/svc); fi

# wait_addr FILE PATTERN: the first address the server logs, within 30 s.
wait_line() {
  for _ in $(seq 300); do
    if grep -q "$2" "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "server did not start; its log:" >&2; cat "$1" >&2; exit 1
}

# start_svc BINARY NAME: a fresh svc log under $WORK/NAME; sets PID and URL.
start_svc() {
  local d="$WORK/$2"; mkdir -p "$d"; local share=()
  # wrk's connections all come from 127.0.0.1: lift the per-address share where the binary has one.
  "$1" log --help 2>&1 | grep -q max-conns-per-addr && share=(--max-conns-per-addr 1024)
  "$1" keygen --dir "$d" --name log >/dev/null
  "$1" log --file "$d/log.jsonl" --key "$d/log.key" --data "$d/data" --port 0 \
    --checkpoint-every 1 --log-id example.com/svc-race "${share[@]}" 2>"$d/svc.log" &
  PID=$!; pids+=("$PID")
  wait_line "$d/svc.log" "log server listening"
  URL="http://$(grep -m1 "log server listening" "$d/svc.log" | sed -E 's/.* addr=([^ ]+).*/\1/')/$ROUTE"
}
start_svc "$WORK/svc" log-svc; SVC_PID=$PID; SVC_URL=$URL
BASE_URL=""
if [ -n "${SVC_BASE:-}" ]; then start_svc "$WORK/svc-base" log-base; BASE_PID=$PID; BASE_URL=$URL; fi

B_URL=""
if [ -n "${B_FLAGS:-}" ]; then
  # shellcheck disable=SC2086 # B_FLAGS is a list of flags
  "$WORK/svc" log --file "$WORK/log-b.jsonl" --key "$WORK/log.key" --data "$WORK/data-b" --port 0 \
    --checkpoint-every 1 --log-id example.com/svc-race-b --max-conns-per-addr 1024 $B_FLAGS 2>"$WORK/svc-b.log" &
  B_PID=$!; pids+=("$B_PID")
  wait_line "$WORK/svc-b.log" "log server listening"
  B_URL="http://$(grep -m1 "log server listening" "$WORK/svc-b.log" | sed -E 's/.* addr=([^ ]+).*/\1/')/$ROUTE"
fi

TESS_URL=""
if [ -n "${TESSERA_POSIX:-}" ]; then
  keys=$("$WORK/notekey" example.com/tessera-race)
  TPORT=$((20000 + RANDOM % 20000))
  LOG_PRIVATE_KEY=$(echo "$keys" | sed -n 1p) "$TESSERA_POSIX" --storage_dir="$WORK/tessera" \
    --listen="127.0.0.1:$TPORT" 2>"$WORK/tessera.log" &
  TESS_PID=$!; pids+=("$TESS_PID")
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$TPORT/checkpoint" >/dev/null && break; sleep 0.1; done
  TESS_URL="http://127.0.0.1:$TPORT/add"
fi

ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# run NAME PID URL CONNS BODY: one wrk run; prints a table row.
run() {
  local name=$1 pid=$2 url=$3 c=$4 body=$5
  local t0 t1 out
  t0=$(ticks "$pid")
  out=$(WRK_BODY=$body wrk -t1 -c"$c" -d"$DURATION" --timeout 10s -s "$LUA" "$url" 2>&1 | grep '^RESULT' || true)
  t1=$(ticks "$pid")
  if [ -z "$out" ]; then echo "wrk gave no result against $url" >&2; exit 1; fi
  eval "$(echo "$out" | sed -E 's/^RESULT //')"   # requests duration_us errors p50_us p99_us
  local ok=$((requests - errors))
  awk -v n="$name" -v c="$c" -v ok="$ok" -v e="$errors" -v d="$duration_us" -v p50="$p50_us" -v p99="$p99_us" \
      -v cpu="$((t1 - t0))" -v hz="$HZ" 'BEGIN {
    cpk = ok > 0 ? (cpu / hz * 1000) / ok * 1000 : 0
    printf "%-30s %5d %10.0f %9.1f %9.1f %14.1f %7d\n", n, c, ok / (d / 1e6), p50 / 1000, p99 / 1000, cpk, e }'
}

rss() { awk '/VmRSS|VmHWM/ {printf "%s %s %s  ", $1, $2, $3}' "/proc/$1/status"; echo; }

printf "%-30s %5s %10s %9s %9s %14s %7s\n" log conns appends/s p50_ms p99_ms cpu_ms/1000 errors
for c in $CONNS; do
  for r in $(seq "$RUNS"); do
    if [ -n "$BASE_URL" ]; then run "svc-base /$ROUTE" "$BASE_PID" "$BASE_URL" "$c" "$ROUTE"; fi
    run "svc /$ROUTE" "$SVC_PID" "$SVC_URL" "$c" "$ROUTE"
    if [ -n "$B_URL" ]; then run "svc /$ROUTE $B_FLAGS" "$B_PID" "$B_URL" "$c" "$ROUTE"; fi
    if [ -n "$TESS_URL" ]; then run "tessera-posix /add" "$TESS_PID" "$TESS_URL" "$c" add; fi
  done
done
echo "svc log RSS: $(rss "$SVC_PID")"
if [ -n "$BASE_URL" ]; then echo "svc-base RSS: $(rss "$BASE_PID")"; fi
if [ -n "$TESS_URL" ]; then echo "tessera RSS: $(rss "$TESS_PID")"; fi
