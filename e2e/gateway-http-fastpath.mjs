// Drives `svc gateway --http` with the official MCP TypeScript SDK client over
// Streamable HTTP through the steps of fastpath-steps.mjs on one session, with calls
// in flight on three more sessions meanwhile, then a body over the 4 MiB cap and raw
// requests: one tools/call as answered, an unknown session id, another grant and no
// grant on an open session, a terminated session (DELETE, then POST).
// Usage: node gateway-http-fastpath.mjs <url> <grant> <other grant>
// Prints one JSON object with what each step saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { caught, sharedSteps, step } from "./fastpath-steps.mjs";

const [url, grant, otherGrant] = process.argv.slice(2);
const connect = async (name) => {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { "X-Svc-Grant": grant } } });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};
// raw posts a body on a session with the given grant and returns what came back as sent.
const raw = async (session, g, body, method = "POST") => {
  const headers = { "Content-Type": "application/json", Accept: "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-06-18" };
  if (session) headers["Mcp-Session-Id"] = session;
  if (g) headers["X-Svc-Grant"] = g;
  const resp = await fetch(url, { method, headers, body: method === "POST" ? body : undefined });
  return { status: resp.status, contentType: resp.headers.get("content-type"), body: await resp.text() };
};
const call = (id, name, args) => JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });

const a = await connect("svc-http-fastpath-a");
const others = await Promise.all([1, 2, 3].map((i) => connect(`svc-http-fastpath-${i}`)));

// On session a the shared steps (fastpath-steps.mjs), with 8 calls on each of three
// other sessions while its 24 calls are in flight.
const { out, besideResults } = await sharedSteps(a.client, () =>
  others.flatMap((o, s) => Array.from({ length: 8 }, (_, i) => caught(o.client.callTool({ name: "echo", arguments: { message: `session ${s} call ${i}` } })))));
out.otherEchoes = besideResults.map(step);
const session = a.transport.sessionId;
// A body over the gateway's 4 MiB cap.
out.overCap = await raw(session, grant, call(90, "echo", { message: "x".repeat(5 << 20) }));

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
