#!/usr/bin/env bash
# Races svc log against Tessera's POSIX conformance server with Tessera's own load
# tool, the hammer, run with identical flags against both, round-robin: each round
# runs every log once, and the order turns by one each round (svc, Tessera; then
# Tessera, svc; ...) so that neither always runs first while the box drifts (RUNS
# rounds). Both binaries are built outside the repository, e.g.
#
#   git clone --branch v1.0.4 https://github.com/transparency-dev/tessera /work/peers/tessera
#   cd /work/peers/tessera && go build -o bin/ ./cmd/conformance/posix ./internal/hammer
#   HAMMER=/work/peers/tessera/bin/hammer TESSERA_POSIX=/work/peers/tessera/bin/posix RUNS=3 bench/race/hammer.sh
#
# With SVC_BASE=<a checkout of a baseline revision> the svc log built from it runs too,
# in the same rotation: base, svc, Tessera; svc, Tessera, base; ...
#
# The hammer shows its figures only in its terminal UI, so it runs in a detached tmux
# pane that is read with capture-pane: the tree size at WARMUP and at the end gives
# the sustained writes/s; "Time-in-queue" (the /add latency) and
# "Observed-time-to-integrate" (until a checkpoint covers the leaf) are its moving
# averages at the end (the hammer polls /checkpoint every 500 ms, so its integration
# time cannot show less than that); bench/race/tti, run beside it, reports as
# percentiles, each under its own name and the same way for both logs, the time to a
# proof in hand (svc: its /add answer carries one; Tessera: a covering checkpoint,
# then the proof from its tiles) and the time to a published checkpoint. CPU (utime+stime) and RSS of each server come from /proc, and
# busy_% is the whole machine's (all processes, all cores) over the run: near 100 the
# box, not the log, sets the pace; others_% is the part of it neither the log nor
# the hammer used (other work on the box: a run beside a large one says little);
# hammer_us/entry is the hammer's own CPU per entry.
#
# Each log under test runs pinned to one core (LOG_CPU) and the hammer to the other
# (HAMMER_CPU) with taskset, the same for every log: on a 2-core box the two then do
# not take each other's core, and each Go server sees one CPU (GOMAXPROCS 1). PIN=0
# lets both float as before.
#
# Each run starts once the box is quiet (QUIET, below), reports how much of it other
# work took meanwhile (others_%), and is run again when that was over NOISY_PCT.
#
# At the end each round's svc run is set against its Tessera run: writes/s, CPU per
# entry, and the probe's time to a proof in hand and to a published checkpoint at
# p50, as ratios, then each ratio's median and spread (min-max) over the rounds. Each
# run's line ends with the box's 1-minute load average (uptime) at its end. At the
# hammer's default WRITE_OPS both logs are saturated and 256 writers wait in line, so
# each /add waits about 256 ÷ writes/s (Little's law) and time to integrate measures
# throughput once more; WRITE_OPS below both logs' capacity (say 10000) races the
# time to integrate at one offered load, the same for both.
#
# Environment: RUNS (2), SECONDS_PER_RUN (40), WARMUP (10), WRITERS (256),
# WRITE_OPS (40000), CHECKPOINT_EVERY (1 s for svc; Tessera's conformance server
# publishes every second), PIN (1), LOG_CPU (0), HAMMER_CPU (1), QUIET (1),
# QUIET_PCT (15), QUIET_MAX (120), NOISY_PCT (20), NOISY_RETRIES (2), PROFILE (1 writes a CPU profile of each svc run,
# cpu-<run>.prof, into WORK; implies KEEP=1), WORK (scratch directory; KEEP=1 keeps
# it).
set -euo pipefail
: "${HAMMER:?set HAMMER to Tessera's hammer binary}"
: "${TESSERA_POSIX:?set TESSERA_POSIX to Tessera's cmd/conformance/posix binary}"
command -v tmux >/dev/null || { echo "tmux not found (apt-get install -y tmux)" >&2; exit 1; }
LOG_PIN=() HAMMER_PIN=()
if [ "${PIN:-1}" = 1 ]; then
  LOG_PIN=(taskset -c "${LOG_CPU:-0}") HAMMER_PIN=(taskset -c "${HAMMER_CPU:-1}")
fi
[ "${PROFILE:-0}" = 1 ] && KEEP=1
RUNS=${RUNS:-2}
SECS=${SECONDS_PER_RUN:-40}
WARMUP=${WARMUP:-10}
WRITERS=${WRITERS:-256}
WRITE_OPS=${WRITE_OPS:-40000}
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
WORK=${WORK:-$(mktemp -d /tmp/svc-hammer.XXXXXX)}
mkdir -p "$WORK"
SESSION=svc-hammer-$$
pids=()
cleanup() {
  tmux kill-session -t "$SESSION" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
(cd "$ROOT" && go build -o "$WORK/svc" ./cmd/svc && go build -o "$WORK/notekey" ./bench/race/notekey && go build -o "$WORK/tti" ./bench/race/tti)
if [ -n "${SVC_BASE:-}" ]; then (cd "$SVC_BASE" && go build -o "$WORK/svc-base" ./cmd/svc); fi
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# busy_idle: the machine's busy and idle ticks (all cores), to tell a saturated box.
busy_idle() { awk '/^cpu / {print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
rsskb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_svc DIR [BINARY]: a fresh svc log; sets PID, URL, VKEY.
start_svc() {
  local d=$1 bin=${2:-$WORK/svc} port; port=$(free_port)
  while [ -e "$d" ]; do d=$d+; done # a run again gets a fresh log too
  mkdir -p "$d"
  "$bin" keygen --dir "$d" --name log >/dev/null
  local prof=(); [ "${PROFILE:-0}" = 1 ] && prof=(--cpuprofile "$WORK/cpu-$(basename "$d").prof")
  # The hammer's writers and readers and the probe all come from 127.0.0.1, where a
  # real log sees many clients: the per-address share (--max-conns/16 by default)
  # would answer most of them 503, and under load the default --max-conns (1,024) was
  # reached too (new connections answered 503: every probe of one run failed), while
  # Tessera's server has no cap. So svc gets 4,096, all to the one address (a
  # revision without the flags has neither cap).
  local share=(); "$bin" log --help 2>&1 | grep -q -- --max-conns-per-addr && share=(--max-conns 4096 --max-conns-per-addr 4096)
  "${LOG_PIN[@]}" "$bin" log --file "$d/log.jsonl" --key "$d/log.key" --data "$d/data" --port "$port" \
    --checkpoint-every "${CHECKPOINT_EVERY:-1}" --log-id example.com/svc-race "${share[@]}" "${prof[@]}" 2>"$d/server.log" &
  PID=$!; pids+=("$PID"); URL="http://127.0.0.1:$port"
  for _ in $(seq 300); do curl -sf "$URL/health" >/dev/null 2>&1 && break; sleep 0.1; done
  # The hammer starts from a checkpoint; svc publishes one once the log holds a leaf.
  curl -sf -XPOST --data-binary "race seed $(date +%s%N)" "$URL/add" >/dev/null
  for _ in $(seq 100); do curl -sf "$URL/checkpoint" >/dev/null 2>&1 && break; sleep 0.1; done
  VKEY=$(cat "$d/data/checkpoints/default/checkpoint.vkey")
}

# start_tessera DIR: a fresh Tessera POSIX log; sets PID, URL, VKEY.
start_tessera() {
  local d=$1 port keys; port=$(free_port)
  while [ -e "$d" ]; do d=$d+; done
  mkdir -p "$d"
  keys=$("$WORK/notekey" example.com/tessera-race)
  LOG_PRIVATE_KEY=$(echo "$keys" | sed -n 1p) "${LOG_PIN[@]}" "$TESSERA_POSIX" --storage_dir="$d/log" \
    --listen="127.0.0.1:$port" 2>"$d/server.log" &
  PID=$!; pids+=("$PID"); URL="http://127.0.0.1:$port"; VKEY=$(echo "$keys" | sed -n 2p)
  for _ in $(seq 300); do curl -sf "$URL/checkpoint" >/dev/null 2>&1 && break; sleep 0.1; done
}

# quiet: before each run, wait (at most QUIET_MAX s) until the box's other work used
# under QUIET_PCT % of it over 2 s, so that the logs race on the same quiet box rather
# than beside whatever else happened to run; QUIET=0 starts at once.
quiet() {
  [ "${QUIET:-1}" = 1 ] || return 0
  local end=$((SECONDS + ${QUIET_MAX:-120})) b0 i0 b1 i1
  while [ "$SECONDS" -lt "$end" ]; do
    read -r b0 i0 < <(busy_idle); sleep 2; read -r b1 i1 < <(busy_idle)
    [ $((100 * (b1 - b0))) -lt $((${QUIET_PCT:-15} * (b1 - b0 + i1 - i0))) ] && return 0
  done
  echo "(the box stayed busy for ${QUIET_MAX:-120} s; racing anyway)" >&2
}

pane_size() { tmux capture-pane -p -t "$SESSION" | sed -nE 's/.*TreeSize: ([0-9]+).*/\1/p' | head -1; }
pane_avg() { tmux capture-pane -p -t "$SESSION" | grep -o "$1: [^ ]*" | head -1 | sed "s/$1: //"; }

# race NAME: one hammer run against the log started last.
race() {
  local name=$1
  tmux kill-session -t "$SESSION" 2>/dev/null || true
  quiet
  tmux new-session -d -s "$SESSION" -x 200 -y 50 "${HAMMER_PIN[*]} $HAMMER --log_public_key=$VKEY --log_url=$URL \
    --num_writers=$WRITERS --max_write_ops=$WRITE_OPS --dup_chance=0 --show_ui=true 2>$WORK/hammer-$name.err; sleep 600"
  sleep "$WARMUP"
  # The time-to-integrate probe (bench/race/tti) runs beside the hammer, on its core,
  # over the measured part of the run.
  "${HAMMER_PIN[@]}" "$WORK/tti" --url "$URL" --duration "$((SECS - WARMUP - 1))s" --label "$name" >"$WORK/tti-last.txt" 2>&1 &
  local tti_pid=$!
  local s0 c0 t0 s1 c1 t1 hp h0 h1
  hp=$(pgrep -P "$(tmux list-panes -t "$SESSION" -F '#{pane_pid}')" | head -1)
  s0=$(pane_size); c0=$(ticks "$PID"); h0=$(ticks "$hp"); t0=$(date +%s.%N); read -r b0 i0 < <(busy_idle)
  sleep $((SECS - WARMUP))
  s1=$(pane_size); c1=$(ticks "$PID"); h1=$(ticks "$hp"); t1=$(date +%s.%N); read -r b1 i1 < <(busy_idle)
  wait "$tti_pid" || true
  cat "$WORK/tti-last.txt" >>"$WORK/tti.txt"
  tmux capture-pane -p -t "$SESSION" >"$WORK/pane-$name-$(date +%s).txt"
  local q i r; q=$(pane_avg Time-in-queue); i=$(pane_avg Observed-time-to-integrate); r=$(rsskb "$PID")
  tmux kill-session -t "$SESSION"
  OTHERS=$((100 * ((b1 - b0) - (c1 - c0) - (h1 - h0)) / ((b1 - b0) + (i1 - i0))))
  WRITES=$(awk -v s0="$s0" -v s1="$s1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.0f", (s1 - s0) / (t1 - t0) }')
  CPU=$(awk -v s0="$s0" -v s1="$s1" -v c="$((c1 - c0))" -v hz="$HZ" 'BEGIN { printf "%.1f", (s1 > s0) ? (c / hz) / (s1 - s0) * 1e6 : 0 }')
  LOAD=$(awk '{print $1}' /proc/loadavg)
  awk -v n="$name" -v ld="$LOAD" -v s0="$s0" -v s1="$s1" -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v hz="$HZ" -v q="$q" -v i="$i" -v r="$r" -v hc="$((h1 - h0))" -v busy="$((b1 - b0))" -v idle="$((i1 - i0))" 'BEGIN {
    w = (s1 - s0) / (t1 - t0); cpu = (w > 0) ? (c / hz) / (s1 - s0) * 1e6 : 0; hcpu = (w > 0) ? (hc / hz) / (s1 - s0) * 1e6 : 0
    others = 100 * (busy - c - hc) / (busy + idle); if (others < 0) others = 0
    printf "%-10s %9.0f %26s %26s %12.1f %8.0f %8.0f %8.0f %14.1f %6s\n", n, w, q, i, cpu, r / 1024, 100 * busy / (busy + idle), others, hcpu, ld }'
}

printf "%-10s %9s %26s %26s %12s %8s %8s %8s %14s %6s\n" log writes/s "queue min/avg/max" "integrate min/avg/max" "cpu_us/entry" rss_MiB "busy_%" "others_%" "hammer_us/entry" load1
# run_one NAME START...: a fresh log (START and its arguments start it), one race, the
# log stopped; a run during which other work took over NOISY_PCT % of the box is
# marked and run again, at most NOISY_RETRIES times.
run_one() {
  local name=$1 try; shift
  for try in $(seq 0 "${NOISY_RETRIES:-2}"); do
    "$@"; race "$name"; kill "$PID"; wait "$PID" 2>/dev/null || true
    [ "$OTHERS" -le "${NOISY_PCT:-20}" ] && break
    if [ "$try" -lt "${NOISY_RETRIES:-2}" ]; then echo "  (other work took ${OTHERS}% of the box: $name runs again)"; fi
  done
  # The run that counts (the last one tried): its writes/s, others_%, CPU per entry,
  # load average and the probe's p50 and p99 to a proof in hand and to a published
  # checkpoint, for the rounds summed up at the end.
  printf '%s %s %s %s %s %s %s\n' "$name" "$WRITES" "$OTHERS" "$CPU" "$LOAD" \
    "$(tti_pcts proof_in_hand)" "$(tti_pcts checkpoint)" >>"$WORK/runs.txt"
}

# tti_pcts MEASURE: the last probe's p50 and p99 of MEASURE in ms ("0 0" if none).
tti_pcts() {
  local v; v=$(sed -nE "s/.* $1\[p50=([0-9.]+)ms p90=[0-9.]+ms p99=([0-9.]+)ms.*/\1 \2/p" "$WORK/tti-last.txt")
  echo "${v:-0 0}"
}

# summary: each svc run against the Tessera run of its round (writes/s, CPU per
# entry, and p50 to a proof in hand and to a published checkpoint as the probe saw
# them), then each ratio's median and spread over the rounds.
summary() {
  awk '
    function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    function spread(a, n, f,   i, lo, hi) { lo = a[1]; hi = a[1]; for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
      return sprintf(f "-" f, lo, hi) }
    function ratio(a, b) { return (b > 0) ? a / b : 0 }
    # fields: name writes others cpu load proof50 proof99 cp50 cp99; rounds are
    # counted by lines: every log runs once a round, so the k-th svc and the k-th
    # Tessera line are one round.
    $1 == "svc" { ns++; sw[ns] = $2; so[ns] = $3; sc[ns] = $4; sl[ns] = $5; sp[ns] = $6; sk[ns] = $8 }
    $1 == "tessera" { nt++; tw[nt] = $2; to[nt] = $3; tc[nt] = $4; tl[nt] = $5; tp[nt] = $6; tk[nt] = $8 }
    END {
      n = (ns < nt) ? ns : nt
      for (k = 1; k <= n; k++) {
        w[k] = ratio(sw[k], tw[k]); c[k] = ratio(sc[k], tc[k]); p[k] = ratio(sp[k], tp[k]); q[k] = ratio(sk[k], tk[k])
        printf "round %d: writes/s svc %s vs Tessera %s = %.2fx; CPU/entry %sus vs %sus = %.2fx; proof in hand p50 %sms vs %sms = %.3fx; published checkpoint p50 %sms vs %sms = %.2fx (others %s%%/%s%%, load %s/%s)\n", k, sw[k], tw[k], w[k], sc[k], tc[k], c[k], sp[k], tp[k], p[k], sk[k], tk[k], q[k], so[k], to[k], sl[k], tl[k]
      }
      if (n) {
        printf "median (spread) of %d rounds, svc / Tessera: writes/s %.2fx (%s); CPU per entry %.2fx (%s); time to a proof in hand p50 %.3fx (%s); time to a published checkpoint p50 %.2fx (%s)\n", n, median(w, n), spread(w, n, "%.2f"), median(c, n), spread(c, n, "%.2f"), median(p, n), spread(p, n, "%.3f"), median(q, n), spread(q, n, "%.2f")
      }
    }
  ' "$WORK/runs.txt"
}

# run_log NAME R: log NAME's run of round R.
run_log() {
  case $1 in
  svc-base) run_one svc-base start_svc "$WORK/svc-base-$2" "$WORK/svc-base" ;;
  svc) run_one svc start_svc "$WORK/svc-$2" ;;
  tessera) run_one tessera start_tessera "$WORK/tessera-$2" ;;
  esac
}

logs=(svc tessera)
if [ -n "${SVC_BASE:-}" ]; then logs=(svc-base svc tessera); fi
for r in $(seq "$RUNS"); do
  # Round-robin: round r starts with the ((r-1) mod n)-th log.
  for k in $(seq 0 $((${#logs[@]} - 1))); do
    run_log "${logs[$(((r - 1 + k) % ${#logs[@]}))]}" "$r"
  done
done
echo "time to integrate (bench/race/tti beside the hammer: an /add every 20 ms; answer = the /add answer; proof_in_hand = until the writer holds an inclusion proof under a tree head: the answer when it carries one, else the proof built from the tiles; checkpoint = the first /checkpoint, polled every 5 ms, that covers the index; tiles = the proof built from the tiles under that checkpoint, for every log):"
cat "$WORK/tti.txt"
echo "svc against Tessera, round by round:"
summary
echo "hammer flags: --num_writers=$WRITERS --max_write_ops=$WRITE_OPS --dup_chance=0 (readers at the hammer's defaults); $SECS s a run, the first $WARMUP s not counted; uptime at the end: $(uptime)"
