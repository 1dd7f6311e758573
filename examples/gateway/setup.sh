#!/usr/bin/env bash
# Makes the example runnable: keys, a grant for a day, and gateway.json with absolute
# paths. Run from anywhere; needs `go` and `npm` (for the upstream MCP server).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
[ -d e2e/node_modules ] || npm ci --prefix e2e --no-audit --no-fund
go build -o bin/svc ./cmd/svc
cd "$here"
mkdir -p keys
[ -f keys/alice.key ] || "$root/bin/svc" keygen --dir keys --name alice
[ -f keys/gateway.key ] || "$root/bin/svc" keygen --dir keys --name gateway
"$root/bin/svc" grant --key keys/alice.key --principal alice --agent example-agent \
  --scopes echo,get-sum,get-structured-content --ttl-hours 24 --out grant.json
cat > gateway.json <<JSON
{
  "identity": { "keyFile": "keys/gateway.key" },
  "upstream": { "command": "node", "args": ["$root/e2e/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"] },
  "grantFile": "grant.json",
  "trustedPrincipalKeys": ["keys/alice.pub"],
  "policyFile": "policy.cedar",
  "facts": [ { "name": "weather", "tool": "get-structured-content", "args": { "location": "New York" }, "forTools": ["get-sum"] } ],
  "precommit": ["get-sum"],
  "receiptsDir": "receipts",
  "logFile": "receipts.log"
}
JSON
echo "ready: $root/bin/svc gateway --config $here/gateway.json  (an MCP server on stdio)"
