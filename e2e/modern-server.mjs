// An MCP server on the stateless 2026-07-28 revision, built with the official
// TypeScript SDK's server package (@modelcontextprotocol/server 2.4.0), over stdio.
// Its tool "deploy" asks the client for input the 2026-07-28 way: an input_required
// result per request (an elicitation and a roots/list), answered by the client's
// retry with inputResponses and the requestState echoed. Used by the gateway's
// tests of relaying that input (gateway/modern_e2e_test.go).
// Usage: node modern-server.mjs
import { McpServer, inputRequired, acceptedContent, inputResponse } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import * as z from "zod";

const confirmation = z.object({ confirm: z.boolean() });

function modernServer() {
  const server = new McpServer({ name: "modern", version: "1.0.0" });
  server.registerTool(
    "deploy",
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
  server.registerTool("echo", { description: "Echoes text.", inputSchema: z.object({ text: z.string() }) }, async ({ text }) => ({
    content: [{ type: "text", text }],
  }));
  return server;
}

// serveStdio decides the connection's revision from its opening exchange
// (server/discover: 2026-07-28; initialize: an earlier one).
serveStdio(modernServer);
