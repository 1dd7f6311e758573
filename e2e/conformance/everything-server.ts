// svc's MCP server for the conformance suite: written by svc from the requirements of the
// server scenarios of @modelcontextprotocol/conformance 0.1.16 (the scenario descriptions
// and checks in node_modules/@modelcontextprotocol/conformance/dist, and its README), on
// the official TypeScript SDK @modelcontextprotocol/sdk 1.27.1 pinned in package.json.
// It offers the tools, resources, prompts, completion, logging, progress, sampling and
// elicitation requests and SSE stream behaviour those scenarios check, and nothing else.
//
// Run: node --import tsx everything-server.ts, in e2e/conformance, with PORT set (default
// 3000). It serves Streamable HTTP at http://localhost:$PORT/mcp, one session per
// initialize, on the loopback addresses only, rejecting a non-local Host header (DNS
// rebinding). gateway.TestMCPConformance starts it so and runs the suite against it
// directly and through `svc gateway --http`.
import { randomUUID } from "node:crypto";
import { crc32, deflateSync } from "node:zlib";
import type { Request, Response } from "express";
import { createMcpExpressApp } from "@modelcontextprotocol/sdk/server/express.js";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { EventStore } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  isInitializeRequest,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import type {
  CallToolResult,
  GetPromptResult,
  JSONRPCMessage,
  LoggingLevel,
  ReadResourceResult,
  ServerNotification,
  ServerRequest,
  Tool,
} from "@modelcontextprotocol/sdk/types.js";

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

// ---- media made here: a 1x1 red PNG and a short silent WAV ----

function pngChunk(type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}

function redPixelPNG(): string {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(1, 0); // width
  header.writeUInt32BE(1, 4); // height
  header.set([8, 2, 0, 0, 0], 8); // 8-bit depth, truecolour, no interlace
  const scanline = Buffer.from([0, 255, 0, 0]); // filter none, red
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk("IHDR", header),
    pngChunk("IDAT", deflateSync(scanline)),
    pngChunk("IEND", Buffer.alloc(0)),
  ]).toString("base64");
}

function silentWAV(samples = 800, rate = 8000): string {
  const wav = Buffer.alloc(44 + samples * 2);
  wav.write("RIFF", 0, "ascii");
  wav.writeUInt32LE(36 + samples * 2, 4);
  wav.write("WAVEfmt ", 8, "ascii");
  wav.writeUInt32LE(16, 16); // fmt chunk size
  wav.writeUInt16LE(1, 20); // PCM
  wav.writeUInt16LE(1, 22); // mono
  wav.writeUInt32LE(rate, 24);
  wav.writeUInt32LE(rate * 2, 28); // byte rate
  wav.writeUInt16LE(2, 32); // block align
  wav.writeUInt16LE(16, 34); // bits per sample
  wav.write("data", 36, "ascii");
  wav.writeUInt32LE(samples * 2, 40);
  return wav.toString("base64");
}

const PNG = redPixelPNG();
const WAV = silentWAV();

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

// ---- per-session state ----

const levels: LoggingLevel[] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/** Session is what one initialized client has set: its log level and subscriptions. */
class Session {
  level: LoggingLevel = "info";
  subscriptions = new Set<string>();

  /** log sends a notifications/message on the stream of the request extra belongs to. */
  async log(extra: Extra, level: LoggingLevel, data: string): Promise<void> {
    if (levels.indexOf(level) < levels.indexOf(this.level)) return;
    await extra.sendNotification({ method: "notifications/message", params: { level, logger: "everything-server", data } });
  }
}

// ---- tools ----

const noArgs = { type: "object" as const, properties: {} };

const tools: Tool[] = [
  { name: "test_simple_text", description: "Returns one text content item", inputSchema: noArgs },
  { name: "test_image_content", description: "Returns a 1x1 red PNG image", inputSchema: noArgs },
  { name: "test_audio_content", description: "Returns a short silent WAV clip", inputSchema: noArgs },
  { name: "test_embedded_resource", description: "Returns an embedded text resource", inputSchema: noArgs },
  { name: "test_multiple_content_types", description: "Returns text, image and resource content", inputSchema: noArgs },
  { name: "test_tool_with_logging", description: "Sends three info log messages while it runs", inputSchema: noArgs },
  { name: "test_tool_with_progress", description: "Reports progress 0, 50 and 100 of 100", inputSchema: noArgs },
  { name: "test_error_handling", description: "Always fails with isError set", inputSchema: noArgs },
  {
    name: "test_sampling",
    description: "Asks the client's LLM (sampling/createMessage) and returns its answer",
    inputSchema: { type: "object", properties: { prompt: { type: "string", description: "The prompt for the LLM" } }, required: ["prompt"] },
  },
  {
    name: "test_elicitation",
    description: "Asks the user (elicitation/create) for a username and email",
    inputSchema: { type: "object", properties: { message: { type: "string", description: "The message shown to the user" } }, required: ["message"] },
  },
  { name: "test_elicitation_sep1034_defaults", description: "Elicits fields of every primitive type, each with a default (SEP-1034)", inputSchema: noArgs },
  { name: "test_elicitation_sep1330_enums", description: "Elicits the five enum schema forms (SEP-1330)", inputSchema: noArgs },
  {
    name: "json_schema_2020_12_tool",
    description: "Tool with JSON Schema 2020-12 features",
    inputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      $defs: { address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } } },
      properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
      additionalProperties: false,
    },
  },
  { name: "test_reconnection", description: "Closes the call's SSE stream before answering, so the client resumes (SEP-1699)", inputSchema: noArgs },
];

const text = (t: string): CallToolResult => ({ content: [{ type: "text", text: t }] });

/** sep1034Schema: a field of each primitive type with a default (SEP-1034). */
const sep1034Schema = {
  type: "object" as const,
  properties: {
    name: { type: "string" as const, description: "Name", default: "John Doe" },
    age: { type: "integer" as const, description: "Age", default: 30 },
    score: { type: "number" as const, description: "Score", default: 95.5 },
    status: { type: "string" as const, description: "Status", enum: ["active", "inactive", "pending"], default: "active" },
    verified: { type: "boolean" as const, description: "Verified", default: true },
  },
};

/** sep1330Schema: the five enum forms of SEP-1330. */
const sep1330Schema = {
  type: "object" as const,
  properties: {
    untitledSingle: { type: "string", description: "Untitled single choice", enum: ["option1", "option2", "option3"] },
    titledSingle: {
      type: "string",
      description: "Titled single choice",
      oneOf: [
        { const: "value1", title: "First Option" },
        { const: "value2", title: "Second Option" },
        { const: "value3", title: "Third Option" },
      ],
    },
    legacyEnum: { type: "string", description: "Legacy titled choice", enum: ["opt1", "opt2", "opt3"], enumNames: ["Option One", "Option Two", "Option Three"] },
    untitledMulti: { type: "array", description: "Untitled multiple choice", items: { type: "string", enum: ["option1", "option2", "option3"] } },
    titledMulti: {
      type: "array",
      description: "Titled multiple choice",
      items: {
        anyOf: [
          { const: "value1", title: "First Choice" },
          { const: "value2", title: "Second Choice" },
          { const: "value3", title: "Third Choice" },
        ],
      },
    },
  },
};

/** elicit sends elicitation/create for the call extra belongs to and describes the answer. */
async function elicit(server: Server, extra: Extra, message: string, requestedSchema: object, prefix: string): Promise<CallToolResult> {
  if (!server.getClientCapabilities()?.elicitation) {
    return { isError: true, content: [{ type: "text", text: "the client does not support elicitation" }] };
  }
  const answer = await extra.sendRequest(
    { method: "elicitation/create", params: { message, requestedSchema } } as ServerRequest,
    ElicitResultSchema,
  );
  return text(`${prefix}action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
}

async function sample(server: Server, extra: Extra, prompt: string): Promise<CallToolResult> {
  if (!server.getClientCapabilities()?.sampling) {
    return { isError: true, content: [{ type: "text", text: "the client does not support sampling" }] };
  }
  const answer = await extra.sendRequest(
    { method: "sampling/createMessage", params: { messages: [{ role: "user", content: { type: "text", text: prompt } }], maxTokens: 100 } },
    CreateMessageResultSchema,
  );
  const reply = answer.content.type === "text" ? answer.content.text : JSON.stringify(answer.content);
  return text(`LLM response: ${reply}`);
}

async function withProgress(extra: Extra): Promise<CallToolResult> {
  const token = extra._meta?.progressToken;
  for (const progress of [0, 50, 100]) {
    if (token !== undefined) {
      await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress, total: 100 } });
    }
    if (progress < 100) await sleep(50);
  }
  return text("Progress reported: 0, 50, 100 of 100");
}

async function withLogging(session: Session, extra: Extra): Promise<CallToolResult> {
  await session.log(extra, "info", "Tool execution started");
  await sleep(50);
  await session.log(extra, "info", "Tool processing data");
  await sleep(50);
  await session.log(extra, "info", "Tool execution completed");
  return text("Tool with logging executed");
}

const retryMs = 500; // the retry field of the SSE streams' priming events

/**
 * reconnection closes the call's stream (when the client can resume: 2025-11-25 and
 * later) and answers after the client has come back with GET and Last-Event-ID: the
 * SDK delivers a response only on an open stream, so it waits three retry intervals.
 */
async function reconnection(extra: Extra): Promise<CallToolResult> {
  if (extra.closeSSEStream) {
    extra.closeSSEStream();
    await sleep(3 * retryMs);
  }
  return text("Reconnection test completed");
}

const fixed: Record<string, CallToolResult> = {
  test_simple_text: text("This is a simple text response for testing."),
  test_image_content: { content: [{ type: "image", data: PNG, mimeType: "image/png" }] },
  test_audio_content: { content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] },
  test_embedded_resource: {
    content: [{ type: "resource", resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." } }],
  },
  test_multiple_content_types: {
    content: [
      { type: "text", text: "Multiple content types test:" },
      { type: "image", data: PNG, mimeType: "image/png" },
      { type: "resource", resource: { uri: "test://mixed-content-resource", mimeType: "application/json", text: JSON.stringify({ test: "data", value: 123 }) } },
    ],
  },
  test_error_handling: { isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] },
};

function stringArg(args: Record<string, unknown> | undefined, name: string): string {
  const v = args?.[name];
  if (typeof v !== "string") throw new McpError(ErrorCode.InvalidParams, `argument ${name} must be a string, got ${typeof v}`);
  return v;
}

async function callTool(server: Server, session: Session, name: string, args: Record<string, unknown> | undefined, extra: Extra): Promise<CallToolResult> {
  if (fixed[name]) return fixed[name];
  switch (name) {
    case "test_tool_with_logging":
      return withLogging(session, extra);
    case "test_tool_with_progress":
      return withProgress(extra);
    case "test_sampling":
      return sample(server, extra, stringArg(args, "prompt"));
    case "test_elicitation":
      return elicit(server, extra, stringArg(args, "message"), {
        type: "object",
        properties: {
          username: { type: "string", description: "User's response" },
          email: { type: "string", description: "User's email address" },
        },
        required: ["username", "email"],
      }, "User response: ");
    case "test_elicitation_sep1034_defaults":
      return elicit(server, extra, "Please review these fields; each has a default", sep1034Schema, "Elicitation completed: ");
    case "test_elicitation_sep1330_enums":
      return elicit(server, extra, "Please choose from each kind of enum", sep1330Schema, "Elicitation completed: ");
    case "json_schema_2020_12_tool":
      return text(`Received: ${JSON.stringify(args ?? {})}`);
    case "test_reconnection":
      return reconnection(extra);
  }
  throw new McpError(ErrorCode.InvalidParams, `unknown tool: ${name}`);
}

// ---- resources ----

const staticResources = [
  { uri: "test://static-text", name: "static-text", description: "A static text resource", mimeType: "text/plain" },
  { uri: "test://static-binary", name: "static-binary", description: "A static binary resource (a PNG)", mimeType: "image/png" },
  { uri: "test://watched-resource", name: "watched-resource", description: "A resource clients may subscribe to", mimeType: "text/plain" },
];

const templatePattern = /^test:\/\/template\/([^/]+)\/data$/;

function readResource(uri: string): ReadResourceResult {
  switch (uri) {
    case "test://static-text":
      return { contents: [{ uri, mimeType: "text/plain", text: "This is the content of the static text resource." }] };
    case "test://static-binary":
      return { contents: [{ uri, mimeType: "image/png", blob: PNG }] };
    case "test://watched-resource":
      return { contents: [{ uri, mimeType: "text/plain", text: "The watched resource's current content." }] };
  }
  const m = templatePattern.exec(uri);
  if (m) {
    const id = decodeURIComponent(m[1]);
    return { contents: [{ uri, mimeType: "application/json", text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
  }
  throw new McpError(ErrorCode.InvalidParams, `resource not found: ${uri}`);
}

// ---- prompts ----

const prompts = [
  { name: "test_simple_prompt", description: "A prompt without arguments" },
  {
    name: "test_prompt_with_arguments",
    description: "A prompt with two arguments",
    arguments: [
      { name: "arg1", description: "First test argument", required: true },
      { name: "arg2", description: "Second test argument", required: true },
    ],
  },
  {
    name: "test_prompt_with_embedded_resource",
    description: "A prompt embedding a resource",
    arguments: [{ name: "resourceUri", description: "URI of the resource to embed", required: true }],
  },
  { name: "test_prompt_with_image", description: "A prompt with an image" },
];

function promptArg(args: Record<string, string> | undefined, name: string): string {
  const v = args?.[name];
  if (v === undefined) throw new McpError(ErrorCode.InvalidParams, `missing required argument ${name}`);
  return v;
}

function getPrompt(name: string, args: Record<string, string> | undefined): GetPromptResult {
  switch (name) {
    case "test_simple_prompt":
      return { messages: [{ role: "user", content: { type: "text", text: "This is a simple prompt for testing." } }] };
    case "test_prompt_with_arguments": {
      const [a1, a2] = [promptArg(args, "arg1"), promptArg(args, "arg2")];
      return { messages: [{ role: "user", content: { type: "text", text: `Prompt with arguments: arg1='${a1}', arg2='${a2}'` } }] };
    }
    case "test_prompt_with_embedded_resource":
      return {
        messages: [
          { role: "user", content: { type: "resource", resource: { uri: promptArg(args, "resourceUri"), mimeType: "text/plain", text: "Embedded resource content for testing." } } },
          { role: "user", content: { type: "text", text: "Please process the embedded resource above." } },
        ],
      };
    case "test_prompt_with_image":
      return {
        messages: [
          { role: "user", content: { type: "image", data: PNG, mimeType: "image/png" } },
          { role: "user", content: { type: "text", text: "Please analyze the image above." } },
        ],
      };
  }
  throw new McpError(ErrorCode.InvalidParams, `unknown prompt: ${name}`);
}

/** completions: suggestions per prompt argument and template variable, filtered by prefix. */
const completions: Record<string, string[]> = {
  "prompt:test_prompt_with_arguments:arg1": ["paris", "park", "party", "test1", "test2"],
  "prompt:test_prompt_with_arguments:arg2": ["hello", "world"],
  "template:test://template/{id}/data:id": ["1", "2", "3", "123"],
};

// ---- the server of one session ----

function newServer(): Server {
  const server = new Server(
    { name: "svc-conformance-everything-server", version: "1.0.0" },
    {
      capabilities: {
        tools: {},
        resources: { subscribe: true },
        prompts: {},
        completions: {},
        logging: {},
      },
    },
  );
  const session = new Session();
  server.setRequestHandler(SetLevelRequestSchema, async (req) => {
    session.level = req.params.level;
    return {};
  });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
  server.setRequestHandler(CallToolRequestSchema, (req, extra) => callTool(server, session, req.params.name, req.params.arguments, extra));
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: staticResources }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [{ uriTemplate: "test://template/{id}/data", name: "template-data", description: "Data for an id", mimeType: "application/json" }],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => readResource(req.params.uri));
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    session.subscriptions.add(req.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    session.subscriptions.delete(req.params.uri);
    return {};
  });
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => getPrompt(req.params.name, req.params.arguments));
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const { ref, argument } = req.params;
    const key = ref.type === "ref/prompt" ? `prompt:${ref.name}:${argument.name}` : `template:${ref.uri}:${argument.name}`;
    const values = (completions[key] ?? []).filter((v) => v.startsWith(argument.value));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

// ---- resumability: a bounded in-memory event store ----

const maxEvents = 10000;

/** MemoryEventStore keeps the last maxEvents SSE events so a client can resume a stream. */
class MemoryEventStore implements EventStore {
  private events = new Map<string, { streamId: string; message: JSONRPCMessage }>();

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}_${randomUUID()}`;
    this.events.set(id, { streamId, message });
    if (this.events.size > maxEvents) this.events.delete(this.events.keys().next().value as string);
    return id;
  }

  async getStreamIdForEventId(eventId: string): Promise<string | undefined> {
    return this.events.get(eventId)?.streamId;
  }

  async replayEventsAfter(lastEventId: string, { send }: { send: (id: string, message: JSONRPCMessage) => Promise<void> }): Promise<string> {
    const last = this.events.get(lastEventId);
    if (!last) throw new Error(`unknown event id ${lastEventId}`);
    let after = false;
    for (const [id, ev] of this.events) {
      if (id === lastEventId) {
        after = true;
      } else if (after && ev.streamId === last.streamId && Object.keys(ev.message).length > 0) {
        await send(id, ev.message);
      }
    }
    return last.streamId;
  }
}

// ---- HTTP ----

const maxSessions = 1000;
const transports = new Map<string, StreamableHTTPServerTransport>();
const eventStore = new MemoryEventStore();

function jsonError(res: Response, status: number, message: string): void {
  res.status(status).json({ jsonrpc: "2.0", error: { code: -32000, message }, id: null });
}

async function handlePost(req: Request, res: Response): Promise<void> {
  const id = req.header("mcp-session-id");
  const existing = id ? transports.get(id) : undefined;
  if (existing) return existing.handleRequest(req, res, req.body);
  if (id) return jsonError(res, 404, `unknown session ${id}`);
  if (!isInitializeRequest(req.body)) return jsonError(res, 400, "no mcp-session-id header, and the request is not an initialize");
  if (transports.size >= maxSessions) return jsonError(res, 503, `at most ${maxSessions} sessions`);
  const server = newServer();
  const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    eventStore,
    retryInterval: retryMs,
    onsessioninitialized: (sid) => void transports.set(sid, transport),
  });
  // The session's end (DELETE, or the transport closed) forgets it; the Server hears of
  // it through the transport (closing the Server here would close the transport again).
  transport.onclose = () => {
    if (transport.sessionId) transports.delete(transport.sessionId);
  };
  await server.connect(transport);
  await transport.handleRequest(req, res, req.body);
}

async function handleSession(req: Request, res: Response): Promise<void> {
  const id = req.header("mcp-session-id");
  const transport = id ? transports.get(id) : undefined;
  if (!transport) return jsonError(res, id ? 404 : 400, id ? `unknown session ${id}` : "missing mcp-session-id header");
  await transport.handleRequest(req, res);
}

function guarded(handler: (req: Request, res: Response) => Promise<void>) {
  return (req: Request, res: Response) => {
    handler(req, res).catch((err: unknown) => {
      console.error(`${req.method} /mcp:`, err);
      if (!res.headersSent) res.status(500).json({ jsonrpc: "2.0", error: { code: -32603, message: "internal error" }, id: null });
    });
  };
}

const app = createMcpExpressApp({ host: "127.0.0.1" }); // its Host check rejects non-local names
app.post("/mcp", guarded(handlePost));
app.get("/mcp", guarded(handleSession));
app.delete("/mcp", guarded(handleSession));

const port = Number(process.env.PORT ?? 3000);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error(`PORT must be a TCP port number, got ${JSON.stringify(process.env.PORT)}`);
  process.exit(2);
}
app.listen(port, "127.0.0.1", () => console.log(`everything server listening on http://localhost:${port}/mcp`));
// ::1 too, for clients that resolve localhost to it; a host without IPv6 has only 127.0.0.1.
app.listen(port, "::1").on("error", (err) => console.error(`not listening on [::1]:${port}: ${err.message}`));
