// An MCP server on the stateless 2026-07-28 revision, built with the official
// TypeScript SDK's server package (@modelcontextprotocol/server 2.4.0), over stdio.
// Its tool "deploy" asks the client for input the 2026-07-28 way: an input_required
// result per request (an elicitation and a roots/list), answered by the client's
// retry with inputResponses and the requestState echoed; "echo" logs what it echoes
// at level info (notifications/message, sent only when the request's _meta asks for
// that level). It also offers a resource (modern://notes/today), a resource template
// (modern://notes/{day}, its day completed), and a prompt "deploy-plan" (its env
// completed); with COLLIDE_PROMPT set, a prompt of that name too. TOOL_PREFIX
// prefixes its tools' names (beside another server offering echo). Used by the
// gateway's tests of relaying that input (gateway/modern_e2e_test.go) and of
// pass-through to more than one upstream (gateway/passroutes_e2e_test.go).
// With --http it serves Streamable HTTP instead (createMcpHandler: 2026-07-28
// requests per request, 2025-era ones stateless) at /mcp on a free port of
// 127.0.0.1, and prints {"port": N} when listening.
// Usage: node modern-server.mjs [--http]
import { createServer } from "node:http";
import { McpServer, ResourceTemplate, createMcpHandler, completable, inputRequired, acceptedContent, inputResponse } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import * as z from "zod";

const confirmation = z.object({ confirm: z.boolean() });

const p = process.env.TOOL_PREFIX ?? "";

function modernServer() {
  const server = new McpServer({ name: "modern", version: "1.0.0" }, { capabilities: { logging: {} } });
  server.registerTool(
    p + "deploy",
    { description: "Deploys after the user confirms and the client names its roots.", inputSchema: z.object({ env: z.string() }) },
    async ({ env }, ctx) => {
      const responses = ctx.mcpReq.inputResponses;
      const state = ctx.mcpReq.requestState();
      const confirmed = acceptedContent(responses, "confirm", confirmation);
      const roots = inputResponse(responses, "roots");
      if (confirmed?.confirm !== true || roots.kind !== "roots") {
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({ message: `Deploy to ${env}?`, requestedSchema: confirmation }),
            roots: inputRequired.listRoots(),
          },
          requestState: `asked-${env}`,
        });
      }
      return {
        content: [{ type: "text", text: `deployed to ${env} (state ${state}, roots ${roots.roots.map((r) => r.uri).join(",")})` }],
      };
    },
  );
  server.registerTool(p + "echo", { description: "Echoes text.", inputSchema: z.object({ text: z.string() }) }, async ({ text }, ctx) => {
    await ctx.mcpReq.log("info", `echoing ${text}`);
    return { content: [{ type: "text", text }] };
  });
  server.registerResource("today", "modern://notes/today", { mimeType: "text/plain" }, async (uri) => ({
    contents: [{ uri: uri.href, text: "notes of today" }],
  }));
  const days = ["monday", "tuesday", "wednesday"];
  server.registerResource(
    "notes",
    new ResourceTemplate("modern://notes/{day}", { list: undefined, complete: { day: (v) => days.filter((d) => d.startsWith(v)) } }),
    { mimeType: "text/plain" },
    async (uri, { day }) => ({ contents: [{ uri: uri.href, text: `notes of ${day}` }] }),
  );
  const plan = (name) =>
    server.registerPrompt(
      name,
      { description: "Plans a deployment.", argsSchema: z.object({ env: completable(z.string(), (v) => ["prod", "preview"].filter((e) => e.startsWith(v))) }) },
      ({ env }) => ({ messages: [{ role: "user", content: { type: "text", text: `${name} from modern: deploy to ${env}` } }] }),
    );
  plan("deploy-plan");
  if (process.env.COLLIDE_PROMPT) plan(process.env.COLLIDE_PROMPT);
  return server;
}

if (process.argv.includes("--http")) {
  const handler = createMcpHandler(modernServer);
  // node:http in front of the handler's web-standard face (Request → Response).
  const http = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = req.method === "GET" || req.method === "HEAD" ? undefined : Buffer.concat(chunks);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
    const response = await handler.fetch(new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers, body }));
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body) for await (const chunk of response.body) res.write(chunk);
    res.end();
  });
  http.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: http.address().port })));
} else {
  // serveStdio decides the connection's revision from its opening exchange
  // (server/discover: 2026-07-28; initialize: an earlier one).
  serveStdio(modernServer);
}
