#!/usr/bin/env bash
# `go tool task up:hosted`: the hosted stack on one machine, everything under $DATA
# (default ./data/hosted): the signer as its own process (the only one holding the log
# key), the database-backed log server with its embedded NATS listening for svc
# log-admin, and the checkpoints host. The PostgreSQL of SVC_DATABASE_URL is used, or,
# when none answers there, a throwaway cluster under ./data/pg (scripts/postgres.sh).
# The admin token is printed on the first run; it is kept in $DATA/admin.token (0600)
# because the server needs it at every start.
#
# Ports (environment or task variables: `go tool task up:hosted PORT=9180`): PORT (the
# log, default 8180), CHECKPOINTS_PORT (PORT+1), SIGNER_PORT (8190), PORTAL_PORT (8170),
# NATS_PORT (4223); none is `go tool task up`'s 8080/8081, so both run side by side. A
# port something already answers on is named before anything starts, with a free one
# to use instead; a component counts as started only when its own process logged that
# it listens (not when some server answers on its port), else its last log lines are
# printed.
#
# The broker's listener admits only the nkey whose seed is $DATA/nats.nk (0600, from
# svc keygen --nats-nkey): the portal and svc log-admin log in with --nats-nkey $DATA/nats.nk.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-./data/hosted}
PORT=${PORT:-8180}; CHECKPOINTS_PORT=${CHECKPOINTS_PORT:-$((PORT + 1))}; SIGNER_PORT=${SIGNER_PORT:-8190}; NATS_PORT=${NATS_PORT:-4223}; PORTAL_PORT=${PORTAL_PORT:-8170}
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
busy=0
for v in PORT CHECKPOINTS_PORT SIGNER_PORT PORTAL_PORT NATS_PORT; do
  p=${!v}
  if taken "$p"; then
    free=$((p + 100)); while taken "$free"; do free=$((free + 1)); done
    echo "up:hosted: port $p ($v) is taken: something already listens there (go tool task up? an earlier up:hosted?); stop it, or choose another: go tool task up:hosted $v=$free" >&2
    busy=1
  fi
done
[ "$busy" = 0 ] || exit 1
export SVC_DATABASE_URL=${SVC_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/svc}
mkdir -p "$DATA/keys" bin
go build -o bin/svc ./cmd/svc
scripts/postgres.sh "$SVC_DATABASE_URL" ./data/pg
first=""
[ -f "$DATA/keys/log.key" ] || bin/svc keygen --dir "$DATA/keys" --name log >/dev/null
[ -f "$DATA/nats.nk" ] || bin/svc keygen --nats-nkey "$DATA/nats.nk" >/dev/null
umask 077
[ -f "$DATA/signer.token" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DATA/signer.token"
[ -f "$DATA/portal.secret" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DATA/portal.secret"
[ -f "$DATA/metrics.token" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DATA/metrics.token"
if [ ! -f "$DATA/admin.token" ]; then head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DATA/admin.token"; first=1; fi
umask 022
export SVC_SIGNER_TOKEN=$(cat "$DATA/signer.token") SVC_ADMIN_TOKEN=$(cat "$DATA/admin.token") SVC_PORTAL_SECRET=$(cat "$DATA/portal.secret")
export SVC_METRICS_TOKEN=$(cat "$DATA/metrics.token")
pids=()
cleanup() { trap - EXIT; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait || true; }
# Ctrl-C (SIGINT) or SIGTERM is the normal way to stop the stack: stop every
# component and exit 0, so that go-task does not report "Failed ... exit status 130".
trap 'cleanup; exit 0' INT TERM
trap cleanup EXIT
# start <name> <log file> <what its process logs once it listens> <command...>: runs
# the command in the background, its output appended to the log file, and waits until
# that process itself logged the line (so another server answering on the port does
# not count); when it ends or stays silent for 30 s, prints its last lines and exits.
start() {
  local name=$1 log=$2 marker=$3; shift 3
  local from; from=$(($(stat -c %s "$log" 2>/dev/null || echo 0) + 1))
  "$@" >>"$log" 2>&1 & pids+=($!)
  local pid=$! i
  for i in $(seq 1 150); do
    tail -c +"$from" "$log" | grep -q "$marker" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "up:hosted: the $name did not start; its last lines ($log):" >&2
  tail -c +"$from" "$log" | tail -n 15 | sed 's/^/  /' >&2
  exit 1
}
start signer "$DATA/signer.log" "^listening" \
  bin/svc signer --key "$DATA/keys/log.key" --port "$SIGNER_PORT" --token-env SVC_SIGNER_TOKEN --state-dir "$DATA/signer-state"
start "log server" "$DATA/log.log" "log server listening" \
  bin/svc log --db-env SVC_DATABASE_URL --signer-url "http://127.0.0.1:$SIGNER_PORT" --signer-token-env SVC_SIGNER_TOKEN \
  --admin-token-env SVC_ADMIN_TOKEN --data "$DATA" --nats-listen "127.0.0.1:$NATS_PORT" --nats-nkey "$DATA/nats.nk" --port "$PORT" \
  --checkpoints-port "$CHECKPOINTS_PORT" --public-url "http://127.0.0.1:$PORT" --checkpoints-url "http://127.0.0.1:$CHECKPOINTS_PORT" \
  --metrics-token-env SVC_METRICS_TOKEN
start portal "$DATA/portal.log" "portal listening" \
  bin/svc portal --db-env SVC_DATABASE_URL --nats-url "nats://127.0.0.1:$NATS_PORT" --nats-nkey "$DATA/nats.nk" --secret-env SVC_PORTAL_SECRET \
  --public-url "http://127.0.0.1:$PORT" --checkpoints-url "http://127.0.0.1:$CHECKPOINTS_PORT" --port "$PORTAL_PORT"
cat <<MSG
svc hosted stack is up (logs in $DATA/*.log).

  log (database-backed)   http://127.0.0.1:$PORT/health   admin page: http://127.0.0.1:$PORT/admin (any user name, the admin token as password)
  checkpoints (read-only) http://127.0.0.1:$CHECKPOINTS_PORT
  signer                  http://127.0.0.1:$SIGNER_PORT/keys
  portal (self-serve)     http://127.0.0.1:$PORTAL_PORT
  NATS (for log-admin)    nats://127.0.0.1:$NATS_PORT (log in with --nats-nkey $DATA/nats.nk, mode 0600)
  database                $SVC_DATABASE_URL
  metrics (token in $DATA/metrics.token; its labels name tenants)
    curl -s -H "Authorization: Bearer \$(cat $DATA/metrics.token)" http://127.0.0.1:$PORT/metrics
MSG
if [ -n "$first" ]; then
  echo; echo "  admin token (shown once; kept in $DATA/admin.token, mode 0600, for restarts):"; echo "    $SVC_ADMIN_TOKEN"
else
  echo; echo "  admin token: the one printed on the first run (in $DATA/admin.token)"
fi
cat <<MSG

Add a tenant and a token:
  export SVC_DATABASE_URL=$SVC_DATABASE_URL
  bin/svc log-admin --db-env SVC_DATABASE_URL --nats-url nats://127.0.0.1:$NATS_PORT --nats-nkey $DATA/nats.nk tenant add acme
  bin/svc log-admin --db-env SVC_DATABASE_URL --nats-url nats://127.0.0.1:$NATS_PORT --nats-nkey $DATA/nats.nk --public-url http://127.0.0.1:$PORT token add acme --label ci
MSG
wait -n "${pids[@]}"
