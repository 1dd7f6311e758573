// The steps the gateway's tools/call fast path must survive, over stdio
// (gateway-fastpath.mjs) and over Streamable HTTP (gateway-http-fastpath.mjs), run
// with the official MCP TypeScript SDK client against server-everything behind
// `svc gateway`: calls in flight together over one session, one of them cancelled
// while the others run (notifications/cancelled), pings and tools/list in between,
// arguments and results far over the read buffers, a tool nobody offers (a JSON-RPC
// error from mcp-go), one outside the grant, an upstream error, a receipt too large
// for the log.

// caught is what a promise gives, or what it threw.
export const caught = async (p) => {
  try {
    return await p;
  } catch (e) {
    return { thrown: String(e && e.message ? e.message : e), code: e && e.code };
  }
};
export const textOf = (r) => (r.content || []).map((c) => c.text || "").join("");
export const step = (r) => ({ text: textOf(r), receipt: r._meta && r._meta["svc/receipt"], isError: !!r.isError, thrown: r.thrown });

// sharedSteps runs the steps on client and returns what each saw, and the results of
// the promises alongside() starts while the 24 calls are in flight.
export async function sharedSteps(client, alongside = () => []) {
  const out = {};
  const abort = new AbortController();
  const long = caught(client.callTool({ name: "trigger-long-running-operation", arguments: { duration: 20, steps: 20 } }, undefined, { signal: abort.signal }));
  const echoes = Array.from({ length: 24 }, (_, i) => caught(client.callTool({ name: "echo", arguments: { message: `call ${i}` } })));
  const pings = Array.from({ length: 4 }, () => caught(client.ping()));
  const listed = caught(client.listTools());
  const beside = alongside();
  await new Promise((r) => setTimeout(r, 300));
  abort.abort("the agent gave up");
  out.echoes = (await Promise.all(echoes)).map(step);
  out.pings = (await Promise.all(pings)).map((r) => !r.thrown);
  out.listed = ((await listed).tools || []).map((t) => t.name).sort();
  const longResult = await long;
  out.cancelled = { thrown: longResult.thrown || "", completed: !longResult.thrown };
  const besideResults = await Promise.all(beside);
  // After the cancellation the session goes on.
  out.after = step(await caught(client.callTool({ name: "echo", arguments: { message: "after the cancellation" } })));

  // Far over the gateway's read buffers (64 KiB) each way: a 200 kB argument echoed
  // back; then 1.5 MB, whose receipt is over the log file's line limit (1 MiB).
  const bigCall = async (n) => {
    const r = await caught(client.callTool({ name: "echo", arguments: { message: "x".repeat(n) } }));
    return { ...step(r), length: textOf(r).length, text: textOf(r).slice(0, 300) };
  };
  out.big = await bigCall(200_000);
  out.huge = await bigCall(1_500_000);

  // Errors: a tool nobody offers, one outside the grant, arguments the upstream refuses.
  out.unknown = await caught(client.callTool({ name: "no-such-tool", arguments: {} }));
  out.denied = step(await caught(client.callTool({ name: "get-env", arguments: {} })));
  out.badArgs = step(await caught(client.callTool({ name: "get-sum", arguments: { a: "not a number", b: 1 } })));
  return { out, besideResults };
}
