#!/usr/bin/env bash
# `go tool task up:hosted`: the hosted stack on one machine, everything under $DATA
# (default ./data/hosted): the signer as its own process (the only one holding the log
# key), the database-backed log server with its embedded NATS listening for svc
# log-admin, and the checkpoints host. The PostgreSQL of SVC_DATABASE_URL is used, or,
# when none answers there, a throwaway cluster under ./data/pg (scripts/postgres.sh).
# The admin token is printed on the first run; it is kept in $DATA/admin.token (0600)
# because the server needs it at every start.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-./data/hosted}
PORT=${PORT:-8080}; CHECKPOINTS_PORT=${CHECKPOINTS_PORT:-8081}; SIGNER_PORT=${SIGNER_PORT:-8090}; NATS_PORT=${NATS_PORT:-4223}; PORTAL_PORT=${PORTAL_PORT:-8070}
export SVC_DATABASE_URL=${SVC_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/svc}
mkdir -p "$DATA/keys" bin
go build -o bin/svc ./cmd/svc
scripts/postgres.sh "$SVC_DATABASE_URL" ./data/pg
first=""
[ -f "$DATA/keys/log.key" ] || bin/svc keygen --dir "$DATA/keys" --name log >/dev/null
umask 077
[ -f "$DATA/signer.token" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DATA/signer.token"
[ -f "$DATA/portal.secret" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DATA/portal.secret"
if [ ! -f "$DATA/admin.token" ]; then head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DATA/admin.token"; first=1; fi
umask 022
export SVC_SIGNER_TOKEN=$(cat "$DATA/signer.token") SVC_ADMIN_TOKEN=$(cat "$DATA/admin.token") SVC_PORTAL_SECRET=$(cat "$DATA/portal.secret")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; }
trap cleanup EXIT INT TERM
bin/svc signer --key "$DATA/keys/log.key" --port "$SIGNER_PORT" --token-env SVC_SIGNER_TOKEN --state-dir "$DATA/signer-state" 2>>"$DATA/signer.log" & pids+=($!)
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$SIGNER_PORT/keys" >/dev/null && break; sleep 0.2; done
bin/svc log --db-env SVC_DATABASE_URL --signer-url "http://127.0.0.1:$SIGNER_PORT" --signer-token-env SVC_SIGNER_TOKEN \
  --admin-token-env SVC_ADMIN_TOKEN --data "$DATA" --nats-listen "127.0.0.1:$NATS_PORT" --port "$PORT" \
  --checkpoints-port "$CHECKPOINTS_PORT" --public-url "http://127.0.0.1:$PORT" --checkpoints-url "http://127.0.0.1:$CHECKPOINTS_PORT" \
  2>>"$DATA/log.log" & pids+=($!)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "the log server did not start; see $DATA/log.log" >&2; exit 1; }
bin/svc portal --db-env SVC_DATABASE_URL --nats-url "nats://127.0.0.1:$NATS_PORT" --secret-env SVC_PORTAL_SECRET \
  --public-url "http://127.0.0.1:$PORT" --checkpoints-url "http://127.0.0.1:$CHECKPOINTS_PORT" --port "$PORTAL_PORT" \
  2>>"$DATA/portal.log" & pids+=($!)
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$PORTAL_PORT/health" >/dev/null && break; sleep 0.2; done
cat <<MSG
svc hosted stack is up (logs in $DATA/*.log).

  log (database-backed)   http://127.0.0.1:$PORT        admin page: http://127.0.0.1:$PORT/admin
  checkpoints (read-only) http://127.0.0.1:$CHECKPOINTS_PORT
  signer                  http://127.0.0.1:$SIGNER_PORT/keys
  portal (self-serve)     http://127.0.0.1:$PORTAL_PORT
  NATS (for log-admin)    nats://127.0.0.1:$NATS_PORT
  database                $SVC_DATABASE_URL
MSG
if [ -n "$first" ]; then
  echo; echo "  admin token (shown once; kept in $DATA/admin.token, mode 0600, for restarts):"; echo "    $SVC_ADMIN_TOKEN"
else
  echo; echo "  admin token: the one printed on the first run (in $DATA/admin.token)"
fi
cat <<MSG

Add a tenant and a token:
  bin/svc log-admin --db-env SVC_DATABASE_URL --nats-url nats://127.0.0.1:$NATS_PORT tenant add acme
  bin/svc log-admin --db-env SVC_DATABASE_URL --nats-url nats://127.0.0.1:$NATS_PORT token add acme --label ci
MSG
wait -n "${pids[@]}"
