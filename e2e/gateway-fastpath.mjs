// Drives `svc gateway` over stdio with the official MCP TypeScript SDK client the way
// the gateway's tools/call fast path must survive: calls in flight together over one
// session, one of them cancelled while the others run (notifications/cancelled), pings
// and tools/list in between, arguments and results far over the read buffers, a tool nobody
// offers (a JSON-RPC error from mcp-go), one outside the grant, an upstream error, a
// receipt too large for the log.
// Usage: node gateway-fastpath.mjs <svc> <config>
// Prints one JSON object with what each step saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [svc, config] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: svc, args: ["gateway", "--config", config], stderr: "inherit" });
const client = new Client({ name: "svc-fastpath", version: "1.0.0" });
await client.connect(transport);
const out = {};
const caught = async (p) => {
  try {
    return await p;
  } catch (e) {
    return { thrown: String(e && e.message ? e.message : e), code: e && e.code };
  }
};
const textOf = (r) => (r.content || []).map((c) => c.text || "").join("");

// Calls in flight together, one cancelled midway, pings and a listing interleaved.
const abort = new AbortController();
const long = caught(client.callTool({ name: "trigger-long-running-operation", arguments: { duration: 20, steps: 20 } }, undefined, { signal: abort.signal }));
const echoes = Array.from({ length: 24 }, (_, i) => caught(client.callTool({ name: "echo", arguments: { message: `call ${i}` } })));
const pings = Array.from({ length: 4 }, () => caught(client.ping()));
const listed = caught(client.listTools());
await new Promise((r) => setTimeout(r, 300));
abort.abort("the agent gave up");
const echoed = await Promise.all(echoes);
out.echoes = echoed.map((r) => ({ text: textOf(r), receipt: r._meta && r._meta["svc/receipt"], isError: !!r.isError, thrown: r.thrown }));
out.pings = (await Promise.all(pings)).map((r) => !r.thrown);
out.listed = ((await listed).tools || []).map((t) => t.name).sort();
const longResult = await long;
out.cancelled = { thrown: longResult.thrown || "", completed: !longResult.thrown };
// After the cancellation the session goes on.
const after = await caught(client.callTool({ name: "echo", arguments: { message: "after the cancellation" } }));
out.after = { text: textOf(after), receipt: after._meta && after._meta["svc/receipt"] };

// Lines far over the gateway's read buffers (64 KiB) each way: a 200 kB argument
// echoed back; then 1.5 MB, whose receipt is over the log file's line limit (1 MiB).
const bigCall = async (n) => {
  const r = await caught(client.callTool({ name: "echo", arguments: { message: "x".repeat(n) } }));
  return { length: textOf(r).length, text: textOf(r).slice(0, 300), isError: !!r.isError, receipt: r._meta && r._meta["svc/receipt"], thrown: r.thrown };
};
out.big = await bigCall(200_000);
out.huge = await bigCall(1_500_000);

// Errors: a tool nobody offers, one outside the grant, arguments the upstream refuses.
out.unknown = await caught(client.callTool({ name: "no-such-tool", arguments: {} }));
const denied = await caught(client.callTool({ name: "get-env", arguments: {} }));
out.denied = { text: textOf(denied), isError: !!denied.isError, thrown: denied.thrown };
const bad = await caught(client.callTool({ name: "get-sum", arguments: { a: "not a number", b: 1 } }));
out.badArgs = { text: textOf(bad), isError: !!bad.isError, receipt: bad._meta && bad._meta["svc/receipt"], thrown: bad.thrown };

await client.close();
console.log(JSON.stringify(out));
