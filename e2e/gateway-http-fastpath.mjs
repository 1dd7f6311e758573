// Drives `svc gateway --http` with the official MCP TypeScript SDK client over
// Streamable HTTP the way the gateway's tools/call fast path must survive: calls in
// flight together on one session and on several, one cancelled while the others run
// (notifications/cancelled), pings and tools/list in between, arguments and results
// of 200 kB and 1.5 MB, a body over the 4 MiB cap, the errors (a tool nobody offers,
// one outside the grant, arguments the upstream refuses), and raw requests: an
// unknown session id, a terminated session (DELETE, then POST), another grant and no
// grant on an existing session.
// Usage: node gateway-http-fastpath.mjs <url> <grant> <other grant>
// Prints one JSON object with what each step saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, grant, otherGrant] = process.argv.slice(2);
const connect = async (name) => {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { "X-Svc-Grant": grant } } });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};
const caught = async (p) => {
  try {
    return await p;
  } catch (e) {
    return { thrown: String(e && e.message ? e.message : e), code: e && e.code };
  }
};
const textOf = (r) => (r.content || []).map((c) => c.text || "").join("");
const step = (r) => ({ text: textOf(r), receipt: r._meta && r._meta["svc/receipt"], isError: !!r.isError, thrown: r.thrown });
// raw posts a body on a session with the given grant and returns what came back as sent.
const raw = async (session, g, body, method = "POST") => {
  const headers = { "Content-Type": "application/json", Accept: "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-06-18" };
  if (session) headers["Mcp-Session-Id"] = session;
  if (g) headers["X-Svc-Grant"] = g;
  const resp = await fetch(url, { method, headers, body: method === "POST" ? body : undefined });
  return { status: resp.status, contentType: resp.headers.get("content-type"), body: await resp.text() };
};
const call = (id, name, args) => JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });

const out = {};
const a = await connect("svc-http-fastpath-a");
const others = await Promise.all([1, 2, 3].map((i) => connect(`svc-http-fastpath-${i}`)));

// On session a: 24 calls in flight, one long call cancelled midway, pings and a listing
// interleaved; on three other sessions 8 calls each at the same time.
const abort = new AbortController();
const long = caught(a.client.callTool({ name: "trigger-long-running-operation", arguments: { duration: 20, steps: 20 } }, undefined, { signal: abort.signal }));
const echoes = Array.from({ length: 24 }, (_, i) => caught(a.client.callTool({ name: "echo", arguments: { message: `call ${i}` } })));
const pings = Array.from({ length: 4 }, () => caught(a.client.ping()));
const listed = caught(a.client.listTools());
const otherEchoes = others.flatMap((o, s) => Array.from({ length: 8 }, (_, i) => caught(o.client.callTool({ name: "echo", arguments: { message: `session ${s} call ${i}` } }))));
await new Promise((r) => setTimeout(r, 300));
abort.abort("the agent gave up");
out.echoes = (await Promise.all(echoes)).map(step);
out.otherEchoes = (await Promise.all(otherEchoes)).map(step);
out.pings = (await Promise.all(pings)).map((r) => !r.thrown);
out.listed = ((await listed).tools || []).map((t) => t.name).sort();
const longResult = await long;
out.cancelled = { thrown: longResult.thrown || "", completed: !longResult.thrown };
out.after = step(await caught(a.client.callTool({ name: "echo", arguments: { message: "after the cancellation" } })));

// Big: 200 kB each way; 1.5 MB, whose receipt is over the log file's line limit; a
// body over the gateway's 4 MiB cap.
const bigCall = async (n) => {
  const r = await caught(a.client.callTool({ name: "echo", arguments: { message: "x".repeat(n) } }));
  return { ...step(r), length: textOf(r).length, text: textOf(r).slice(0, 300) };
};
out.big = await bigCall(200_000);
out.huge = await bigCall(1_500_000);
const session = a.transport.sessionId;
out.overCap = await raw(session, grant, call(90, "echo", { message: "x".repeat(5 << 20) }));

// Errors: a tool nobody offers, one outside the grant, arguments the upstream refuses.
out.unknown = await caught(a.client.callTool({ name: "no-such-tool", arguments: {} }));
out.denied = step(await caught(a.client.callTool({ name: "get-env", arguments: {} })));
out.badArgs = step(await caught(a.client.callTool({ name: "get-sum", arguments: { a: "not a number", b: 1 } })));

// Raw requests: one answered by the fast path, as sent; an unknown session; another
// grant and no grant on session a; a terminated session.
out.rawCall = await raw(session, grant, call(91, "echo", { message: "raw" }));
out.unknownSession = await raw("mcp-session-00000000-0000-4000-8000-000000000000", grant, call(92, "echo", { message: "nobody's" }));
out.otherGrant = await raw(session, otherGrant, call(93, "echo", { message: "other grant" }));
out.noGrant = await raw(session, "", call(94, "echo", { message: "no grant" }));
const ended = others[2];
const endedSession = ended.transport.sessionId;
await ended.transport.terminateSession();
out.terminated = await raw(endedSession, grant, call(95, "echo", { message: "after DELETE" }));
out.terminatedClient = step(await caught(ended.client.callTool({ name: "echo", arguments: { message: "after DELETE" } })));
out.afterOthers = step(await caught(a.client.callTool({ name: "echo", arguments: { message: "still open" } })));

for (const c of [a, ...others]) await c.client.close();
console.log(JSON.stringify(out));
