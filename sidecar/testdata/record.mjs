// An agent written in JavaScript records two tool calls through the sidecar, with
// nothing but Node's global fetch: one the policy allows and the tool runs, one the
// policy denies. Usage: node record.mjs <sidecar base URL>. Prints
// {"health": ..., "receipts": [<id>, ...]} on stdout; exits 1 on any surprise.

const base = process.argv[2];
if (!base) {
  console.error("usage: node record.mjs <sidecar base URL>");
  process.exit(2);
}

async function call(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200) {
    throw new Error(`${method} ${path}: ${res.status} ${text}`);
  }
  return JSON.parse(text);
}

function receiptIdOf(bundle) {
  const statement = JSON.parse(Buffer.from(bundle.envelope.payload, "base64").toString("utf8"));
  return statement.predicate.receiptId;
}

try {
  const health = await call("GET", "/health");
  const session = { id: "node-session-1", toolUseId: "toolu_01" };

  // 1. Allowed: decide, run the "tool", record what it returned.
  const refund = { tool: "refund", args: { amount: 40, order: "A-17" }, model: "claude-test", session };
  const allow = await call("POST", "/decide", refund);
  if (!allow || allow.decision !== "allow") throw new Error("expected allow, got " + JSON.stringify(allow));
  const result = { refunded: 40, currency: "EUR" };
  const executed = await call("POST", "/record", { event: refund, outcome: { status: "executed", result }, policy: allow });

  // 2. Denied: 12.5 is not an integer, so the policy cannot compare it and denies.
  const fractional = { tool: "refund", args: { amount: 12.5, order: "A-18" }, session: { id: "node-session-1", toolUseId: "toolu_02" } };
  const deny = await call("POST", "/decide", fractional);
  if (!deny || deny.decision !== "deny" || deny.errors.length === 0) throw new Error("expected deny with an error, got " + JSON.stringify(deny));
  const denied = await call("POST", "/record", {
    event: fractional,
    outcome: { status: "denied", reason: "policy: " + deny.errors.join("; ") },
    policy: deny,
  });

  // 3. A malformed outcome is a 400 with { error }.
  const bad = await fetch(base + "/record", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ event: refund, outcome: { status: "done" } }),
  });
  const badBody = await bad.json();
  if (bad.status !== 400 || typeof badBody.error !== "string") throw new Error("malformed outcome: " + bad.status);

  console.log(JSON.stringify({ health, receipts: [receiptIdOf(executed), receiptIdOf(denied)] }));
} catch (e) {
  console.error(String(e));
  process.exit(1);
}
