#!/usr/bin/env bash
# `go tool task setup` (the test task runs it first): installs what the tests need on
# a fresh machine that has only Go, saying what it installs, and does nothing when
# everything is there:
#   - Debian packages (scripts/debian.sh, one apt-get update): nodejs and npm (the
#     gateway's end-to-end tests drive the npm MCP parts), chromium (the portal's
#     browser tests), systemd (deploy/'s test runs systemd-analyze verify on the units),
#     postgresql (the database tests), curl (the tests run the curl lines svc prints);
#   - e2e's and e2e/conformance's npm packages as pinned by their package-lock.json
#     (npm ci), again whenever a lock file changes;
#   - stripe-mock, the payment provider's mock the portal's billing tests start (go
#     install, pinned);
#   - a PostgreSQL answering at $SVC_TEST_DATABASE_URL (default
#     postgres://postgres@127.0.0.1:5432/test): the machine's, else a throwaway cluster
#     under ./data/pg (scripts/postgres.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
STRIPE_MOCK=github.com/stripe/stripe-mock@v0.203.0
url=${SVC_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v curl >/dev/null || missing+=(curl) # svc up's printed commands (TestUpPrintedCommandsRun), up:hosted
[ -x /usr/bin/chromium ] || [ -x /usr/bin/chromium-browser ] || [ -n "${SVC_CHROMIUM:-}" ] || missing+=(chromium)
command -v systemd-analyze >/dev/null || missing+=(systemd)
{ command -v psql >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing+=(postgresql)
bash scripts/debian.sh "${missing[@]}"

# npm ci when a node_modules is absent or was installed from another lock file: e2e's
# (the MCP SDK and servers) and e2e/conformance's (the MCP conformance suite, with the
# Node 22 it needs from npm's node package).
for dir in e2e e2e/conformance; do
  lock=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  stamp=$dir/node_modules/.svc-package-lock.sha256
  if [ "$(cat "$stamp" 2>/dev/null)" != "$lock" ]; then
    echo "setup: installing $dir's npm packages (npm ci --prefix $dir, pinned by $dir/package-lock.json)" >&2
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
    echo "$lock" > "$stamp"
  fi
done

bin=$(go env GOBIN); bin=${bin:-$(go env GOPATH)/bin}
if [ ! -x "$bin/stripe-mock" ] || ! go version -m "$bin/stripe-mock" 2>/dev/null | grep -q "mod.*${STRIPE_MOCK/@/[[:space:]]}"; then
  echo "setup: installing stripe-mock into $bin (go install $STRIPE_MOCK)" >&2
  go install "$STRIPE_MOCK"
fi

bash scripts/postgres.sh "$url" ./data/pg
