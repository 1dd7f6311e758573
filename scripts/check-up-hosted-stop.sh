#!/usr/bin/env bash
# Scripted check (issue 29, point 11): Ctrl-C stops `go tool task up:hosted` cleanly.
# Runs it in its own process group on kernel-picked free ports with its data and
# database apart, waits for the banner, sends SIGINT to the whole group (as a terminal's
# Ctrl-C does), and requires exit status 0 and no "Failed" from go-task.
set -euo pipefail
cd "$(dirname "$0")/.."
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tmp=$(mktemp -d); out="$tmp/out"
export DATA="$tmp/hosted" PORT=$(free) CHECKPOINTS_PORT=$(free) SIGNER_PORT=$(free) NATS_PORT=$(free) PORTAL_PORT=$(free)
export SVC_DATABASE_URL=${CHECK_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/check_up_hosted}
setsid go tool task up:hosted >"$out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "svc hosted stack is up" "$out" && break; kill -0 "$pid" 2>/dev/null || break; sleep 1; done
grep -q "svc hosted stack is up" "$out" || { cat "$out"; echo "check: the stack did not come up" >&2; exit 1; }
kill -INT -- "-$pid"
rc=0; wait "$pid" || rc=$?
if [ "$rc" != 0 ] || grep -q "Failed" "$out"; then
  cat "$out"; echo "check: Ctrl-C ended up:hosted with status $rc" >&2; exit 1
fi
echo "check: Ctrl-C stopped up:hosted with status 0"
rm -rf "$tmp"
