// Drives `svc gateway` over stdio with the official MCP TypeScript SDK client through
// the steps of fastpath-steps.mjs.
// Usage: node gateway-fastpath.mjs <svc> <config>
// Prints one JSON object with what each step saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { sharedSteps } from "./fastpath-steps.mjs";

const [svc, config] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: svc, args: ["gateway", "--config", config], stderr: "inherit" });
const client = new Client({ name: "svc-fastpath", version: "1.0.0" });
await client.connect(transport);
const { out } = await sharedSteps(client);
await client.close();
console.log(JSON.stringify(out));
