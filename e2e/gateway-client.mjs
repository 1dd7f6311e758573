// Drives an svc gateway with the official MCP TypeScript SDK client, as an agent would.
// Usage: node gateway-client.mjs <scenario.json>
// scenario: { transport: "stdio" | "http", command?, args?, env?, url?, grant?, calls: [{ name, arguments, _meta? }] }
// (env: the variables a client's server entry adds to the few the SDK passes on)
// A call may instead be { waitListChanged: true } (wait, up to 20 s, for one more
// notifications/tools/list_changed than seen so far) or { list: true } (tools/list again).
// Prints one JSON object: { tools: [names], results: [CallToolResult | { thrown }],
// lists: [[names] per { list }], listChanged: notifications received, waitErrors }
// or { connectError } when the connection was refused (a bad grant over HTTP: 403).
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const sc = JSON.parse(readFileSync(process.argv[2], "utf8"));
let transport;
if (sc.transport === "http") {
  const headers = sc.grant ? { "X-Svc-Grant": sc.grant } : {};
  transport = new StreamableHTTPClientTransport(new URL(sc.url), { requestInit: { headers } });
} else {
  transport = new StdioClientTransport({ command: sc.command, args: sc.args, env: sc.env, stderr: "inherit" });
}
const client = new Client({ name: "svc-e2e-agent", version: "1.0.0" });
let listChanged = 0;
let wake = () => {};
client.setNotificationHandler(ToolListChangedNotificationSchema, () => { listChanged++; wake(); });
try {
  await client.connect(transport);
} catch (e) {
  console.log(JSON.stringify({ connectError: String(e && e.message ? e.message : e) }));
  process.exit(0);
}
const out = { tools: [], results: [], lists: [], listChanged: 0, waitErrors: [] };
let seen = 0;
const listed = await client.listTools();
out.tools = listed.tools.map((t) => t.name).sort();
for (const call of sc.calls || []) {
  if (call.waitListChanged) {
    const deadline = Date.now() + 20000;
    while (listChanged <= seen && Date.now() < deadline) {
      await new Promise((r) => { wake = r; setTimeout(r, 200); });
    }
    if (listChanged <= seen) out.waitErrors.push(`no notifications/tools/list_changed within 20 s (after ${seen})`);
    seen = listChanged;
    continue;
  }
  if (call.list) {
    out.lists.push((await client.listTools()).tools.map((t) => t.name).sort());
    continue;
  }
  try {
    const params = { name: call.name, arguments: call.arguments || {} };
    if (call._meta) params._meta = call._meta;
    out.results.push(await client.callTool(params));
  } catch (e) {
    out.results.push({ thrown: String(e && e.message ? e.message : e) });
  }
}
if (sc.transport === "http" && transport.terminateSession) {
  try { await transport.terminateSession(); } catch {}
}
await client.close();
out.listChanged = listChanged;
console.log(JSON.stringify(out));
