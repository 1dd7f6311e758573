// What a user feels of the gateway, measured from outside: the official MCP TypeScript
// SDK client calls read_text_file of the npm server-filesystem directly, and through
// `svc gateway` over stdio and over Streamable HTTP (one session, then many), in one run.
// For each: p50/p99 of calls one at a time, calls/s with --inflight calls in flight, and
// the gateway's CPU per call read from /proc/<pid>/stat (user + system time) with its
// threads' context switches per call (/proc/<pid>/task/*/status), and the p50 of ping
// one at a time (the transport's share: no upstream, no receipt).
//
// The variants run round-robin: --rounds rounds (default 3), each running every
// variant once with a fresh process, and the order turns by one each round (direct,
// peer, svc ...; then peer, svc ..., direct), so that no variant always runs first or
// last while the machine's load drifts. Each figure is reported as the median over
// the rounds, with the spread (min-max) of p50, calls/s and its ratio to direct (that
// ratio taken within each round), and the 1-minute load average (uptime) seen at
// each round's end.
//
// Usage: node bench-gateway.mjs --svc <svc binary> [--work <dir>] [--calls 1500] [--inflight 8] [--sessions 32] [--rounds 3] [--remote-log] [--peer <argv as JSON>] [--peer-http <argv as JSON>] [--profile <dir>] [--json]
// --remote-log also measures the stdio gateway with its log in a separate `svc log` process,
// over HTTP (log.url, the append route) and over NATS (log.nats, the log's pipeline), next
// to the local log file.
// --peer also measures another gateway in the same run, over stdio: its command line as a
// JSON array, in which {node}, {server} and {data} stand for node, the filesystem server's
// script and the directory it serves (the file read is {data}/hello.txt). Its CPU per call
// is the peer process's own (not its children's). --peer-http likewise measures a peer
// serving Streamable HTTP, one session, next to svc gateway --http: {port} in its command
// line is a free port, and the bench calls http://127.0.0.1:{port}/mcp once it accepts
// connections.
// --profile writes the gateway's CPU profiles (svc gateway --cpuprofile) of the last round as
// <dir>/gateway-stdio.prof, <dir>/gateway-http.prof and <dir>/gateway-http-sessions.prof, for
// `go tool pprof`.
// `go tool task bench:gateway` builds svc and runs this.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir, loadavg } from "node:os";
import { join, dirname, resolve } from "node:path";
import { createRequire } from "node:module";
import { createServer, connect } from "node:net";
import { setMaxListeners } from "node:events";
import { randomBytes } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf("--" + name);
  return i >= 0 ? args[i + 1] : def;
};
const svc = opt("svc") && resolve(opt("svc"));
const calls = Number(opt("calls", 1500));
const inflight = Number(opt("inflight", 8));
const sessions = Number(opt("sessions", 32));
const rounds = Number(opt("rounds", 3));
const asJSON = args.includes("--json");
const remoteLog = args.includes("--remote-log");
const profileDir = opt("profile") && resolve(opt("profile"));
const peer = opt("peer") && JSON.parse(opt("peer"));
const peerHTTP = opt("peer-http") && JSON.parse(opt("peer-http"));
const isArgv = (a) => Array.isArray(a) && a.length > 0 && a.every((x) => typeof x === "string");
const profileArgs = (name) => (profileDir ? ["--cpuprofile", join(profileDir, `gateway-${name}.prof`)] : []);
// Receipts are files: where they go matters (on some disks creating files under /tmp
// costs far more kernel time than elsewhere), so the work directory is a flag.
const work = resolve(opt("work", tmpdir()));
if (!svc || !(calls > 0) || !(inflight > 0) || !(sessions > 0) || !(Number.isInteger(rounds) && rounds > 0) || (peer && !isArgv(peer)) || (peerHTTP && !isArgv(peerHTTP))) {
  console.error("usage: node bench-gateway.mjs --svc <svc binary> [--work <dir>] [--calls 1500] [--inflight 8] [--sessions 32] [--rounds 3] [--remote-log] [--peer <argv as JSON>] [--peer-http <argv as JSON>] [--profile <dir>] [--json]");
  process.exit(2);
}
// The SDK's Streamable HTTP transport adds an abort listener per request to one signal
// it keeps for the session; Node warns past 10 (here a few thousand), which is noise.
setMaxListeners(0);
const log = (...a) => console.error(...a);

// The upstream: the npm filesystem server, pinned in package-lock.json.
const require = createRequire(import.meta.url);
const fsServer = join(dirname(require.resolve("@modelcontextprotocol/server-filesystem/package.json")), "dist", "index.js");

// A work directory: keys, a grant, an allow-all policy, one file to read, the config.
execFileSync("mkdir", ["-p", work]);
if (profileDir) execFileSync("mkdir", ["-p", profileDir]);
const dir = mkdtempSync(join(work, "svc-bench-gateway-"));
const data = join(dir, "data");
execFileSync("mkdir", ["-p", data]);
const file = join(data, "hello.txt");
writeFileSync(file, "hello from the filesystem server\n".repeat(32));
const run = (...a) => execFileSync(svc, a, { cwd: dir, stdio: ["ignore", "ignore", "inherit"] });
run("keygen", "--dir", "keys", "--name", "alice");
run("keygen", "--dir", "keys", "--name", "gateway");
run("grant", "--key", "keys/alice.key", "--principal", "alice", "--agent", "bench-agent",
  "--scopes", "read_text_file,list_allowed_directories", "--ttl-hours", "2", "--out", "grant.json");
writeFileSync(join(dir, "policy.cedar"), '@id("all") permit (principal, action, resource);\n');
const config = join(dir, "gateway.json");
writeFileSync(config, JSON.stringify({
  identity: { keyFile: "keys/gateway.key" },
  upstream: { command: process.execPath, args: [fsServer, data] },
  grantFile: "grant.json",
  trustedPrincipalKeys: ["keys/alice.pub"],
  policyFile: "policy.cedar",
  receiptsDir: "receipts",
  logFile: "receipts.log",
}, null, 2));
// The same gateway with its log in a `svc log` server (started when --remote-log is given).
const remoteConfig = join(dir, "gateway-remote.json");
function writeRemoteConfig(logField) {
  const c = JSON.parse(readFileSync(config, "utf8"));
  delete c.logFile;
  c.log = logField;
  c.receiptsDir = "receipts-remote";
  writeFileSync(remoteConfig, JSON.stringify(c, null, 2));
}

// freePort asks the kernel for a free TCP port on loopback.
function freePort() {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// natsPassword is the password the log's broker listener admits for user svc, which
// the gateway's log.nats URL carries (the listener requires credentials).
const natsPassword = randomBytes(24).toString("hex");
let logServers = 0;

// startLogServer runs `svc log` on a free port, its embedded NATS server also on natsPort,
// and returns its URL and process (a fresh log each time; the keys are made once).
let logKeys = false;
function startLogServer(natsPort) {
  if (!logKeys) {
    run("keygen", "--dir", "keys", "--name", "log");
    run("keygen", "--nats-nkey", join(dir, "keys", "nats.nk"));
    logKeys = true;
  }
  const n = ++logServers;
  return new Promise((resolve, reject) => {
    const p = spawn(svc, ["log", "--file", join(dir, `remote-${n}.log`), "--key", join(dir, "keys", "log.key"), "--data", join(dir, `logdata-${n}`), "--port", "0",
      "--nats-listen", `127.0.0.1:${natsPort}`, "--nats-nkey", join(dir, "keys", "nats.nk"), "--nats-listen-password-env", "SVC_NATS_LISTEN_PASSWORD"],
      { cwd: dir, stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, SVC_NATS_LISTEN_PASSWORD: natsPassword } });
    let err = "";
    p.stderr.on("data", (d) => {
      err += d;
      const m = /log server listening.*addr=(\S+)/.exec(err);
      if (m) resolve({ url: `http://${m[1]}`, proc: p });
    });
    p.once("exit", (code) => reject(new Error(`svc log exited ${code}: ${err}`)));
  });
}

const grantB64 = readFileSync(join(dir, "grant.json")).toString("base64url");

// cpuMicros is a process's user + system CPU time so far, in microseconds.
function cpuMicros(pid) {
  const t = cpuTimes(pid);
  return t.user + t.sys;
}

// cpuTimes is a process's user and system CPU time so far, in microseconds: the
// system part is the kernel's work for it (fdatasync, creating the receipt files).
function cpuTimes(pid) {
  if (!pid) return { user: NaN, sys: NaN };
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime, stime (fields 14 and 15); USER_HZ is 100 on Linux
  return { user: (Number(f[11]) * 1e6) / 100, sys: (Number(f[12]) * 1e6) / 100 };
}

// ctxSwitches is the number of times the process's threads have given up their CPU
// so far (voluntary_ctxt_switches, summed over /proc/<pid>/task/*/status): a thread
// parked for want of work, or blocked in the kernel. Every goroutine hand-off that
// wakes a parked thread costs one, so per call it tells the scheduling a call costs,
// which CPU time alone does not show. The involuntary ones (the thread preempted) are
// left out: they count the other processes on the machine.
function ctxSwitches(pid) {
  if (!pid) return NaN;
  let n = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const st = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
      const m = /^voluntary_ctxt_switches:\s+(\d+)$/m.exec(st);
      if (m) n += Number(m[1]);
    } catch {} // a thread that ended meanwhile
  }
  return n;
}

const callOnce = (client) => client.callTool({ name: "read_text_file", arguments: { path: file } });

function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))];
}

// measure: warm-up, then `calls` one at a time, then `calls` with `inflight` in flight.
async function measure(name, client, pid) {
  for (let i = 0; i < 100; i++) {
    const r = await callOnce(client);
    if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content)}`);
  }
  const cpu0 = cpuMicros(pid);
  const sys0 = cpuTimes(pid).sys;
  const ctx0 = ctxSwitches(pid);
  const lat = [];
  for (let i = 0; i < calls; i++) {
    const t = process.hrtime.bigint();
    await callOnce(client);
    lat.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  lat.sort((a, b) => a - b);
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(Array.from({ length: inflight }, async () => {
    while (next++ < calls) await callOnce(client);
  }));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = (cpuMicros(pid) - cpu0) / (2 * calls);
  const sys = (cpuTimes(pid).sys - sys0) / (2 * calls);
  const ctx = (ctxSwitches(pid) - ctx0) / (2 * calls);
  // The transport's own share: ping one at a time, answered by whoever the client
  // talks to, with no upstream and no receipt.
  const pings = [];
  for (let i = 0; i < Math.min(calls, 500); i++) {
    const t = process.hrtime.bigint();
    await client.ping();
    pings.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  pings.sort((a, b) => a - b);
  const row = { name, p50: pct(lat, 50), p99: pct(lat, 99), callsPerSec: calls / secs, cpuPerCallMicros: cpu, sysPerCallMicros: sys, ctxPerCall: ctx, pingP50: pct(pings, 50) };
  log(`  ${name}: p50 ${row.p50.toFixed(2)} ms, p99 ${row.p99.toFixed(2)} ms, ${row.callsPerSec.toFixed(0)} calls/s with ${inflight} in flight` +
    (Number.isNaN(cpu) ? "" : `, gateway CPU ${cpu.toFixed(0)} µs/call (${sys.toFixed(0)} in the kernel), ${ctx.toFixed(1)} context switches/call`) + `; ping p50 ${row.pingP50.toFixed(2)} ms`);
  return row;
}

async function stdioClient(command, argv) {
  // The whole environment, as the HTTP gateway gets it (the SDK passes only a few
  // variables by default): GOMAXPROCS, GOGC or GODEBUG set for a run reach the gateway.
  const transport = new StdioClientTransport({ command, args: argv, stderr: "ignore", env: { ...process.env } });
  const client = new Client({ name: "svc-bench", version: "1.0.0" });
  await client.connect(transport);
  return { client, pid: transport.pid };
}

// httpClient connects over Streamable HTTP, presenting the grant (headers: svc
// gateway's; a peer gets none).
// noGetStream is a fetch that answers the transport's standalone GET stream with 405
// itself (the SDK then goes on without one) and sends every other request.
const noGetStream = (input, init) =>
  (init?.method ?? "GET") === "GET" ? Promise.resolve(new Response(null, { status: 405 })) : fetch(input, init);

// httpClient connects the TS SDK client over Streamable HTTP. getStream false: no
// standalone GET stream (measureHTTPMany).
async function httpClient(url, headers = { "X-Svc-Grant": grantB64 }, getStream = true) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, ...(getStream ? {} : { fetch: noGetStream }) });
  const client = new Client({ name: "svc-bench", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

// startHTTPGateway runs `svc gateway --http` on a free port and returns its URL and pid.
function startHTTPGateway(profileName) {
  return new Promise((resolve, reject) => {
    const p = spawn(svc, ["gateway", "--config", config, "--http", "--port", "0", ...profileArgs(profileName)], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    p.stderr.on("data", (d) => {
      err += d;
      const m = /gateway listening.*addr=(\S+)/.exec(err);
      if (m) resolve({ url: `http://${m[1]}/mcp`, proc: p });
    });
    p.once("exit", (code) => reject(new Error(`svc gateway --http exited ${code}: ${err}`)));
  });
}

// fill puts the run's values in a peer's command line.
const fill = (a, port) => a.replaceAll("{node}", process.execPath).replaceAll("{server}", fsServer).replaceAll("{data}", data).replaceAll("{port}", String(port));

// startPeerHTTP runs the --peer-http command on a free port and resolves once the port
// accepts connections (at most 60 s).
async function startPeerHTTP() {
  const port = await freePort();
  const p = spawn(fill(peerHTTP[0], port), peerHTTP.slice(1).map((a) => fill(a, port)), { stdio: ["ignore", "ignore", "ignore"] });
  let exited = null;
  p.once("exit", (code) => { exited = code; });
  for (const deadline = Date.now() + 60000; Date.now() < deadline;) {
    if (exited !== null) throw new Error(`--peer-http command exited ${exited} before listening on ${port}`);
    const ok = await new Promise((r) => {
      const sock = connect(port, "127.0.0.1", () => { sock.destroy(); r(true); });
      sock.once("error", () => r(false));
    });
    if (ok) return { url: `http://127.0.0.1:${port}/mcp`, proc: p };
    await new Promise((r) => setTimeout(r, 100));
  }
  p.kill("SIGKILL");
  throw new Error(`--peer-http command did not listen on ${port} within 60 s`);
}

// stopProc ends a process the bench started and waits for it.
async function stopProc(proc) {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGTERM");
  await exited;
}

// measureStdio measures one gateway (or the server itself) started over stdio.
async function measureStdio(name, command, argv, withPid = true) {
  const c = await stdioClient(command, argv);
  try {
    return await measure(name, c.client, withPid ? c.pid : NaN);
  } finally {
    await c.client.close();
  }
}

// measureRemote measures the stdio gateway with its log in a fresh `svc log` process,
// reached by logField(url, natsPort).
async function measureRemote(name, logField) {
  const natsPort = await freePort();
  const ls = await startLogServer(natsPort);
  try {
    writeRemoteConfig(logField(ls.url, natsPort));
    return await measureStdio(name, svc, ["gateway", "--config", remoteConfig]);
  } finally {
    await stopProc(ls.proc);
  }
}

async function measurePeerHTTP(name) {
  const ph = await startPeerHTTP();
  try {
    const cl = await httpClient(ph.url, {});
    const row = await measure(name, cl, ph.proc.pid);
    await cl.transport.terminateSession().catch(() => {}); // the peer keeps a server process per session until then
    await cl.close();
    return row;
  } finally {
    await stopProc(ph.proc);
  }
}

async function measureHTTPOne(name) {
  const gw = await startHTTPGateway("http");
  try {
    const one = await httpClient(gw.url);
    const row = await measure(name, one, gw.proc.pid);
    await one.close();
    return row;
  } finally {
    await stopProc(gw.proc);
  }
}

// measureHTTPMany: many sessions at once, each doing its share one call at a time.
// The sessions open no standalone GET stream (idle here: every answer comes on its
// POST): with one, 32 sessions from one address hold 32 streams plus up to 32 POSTs,
// and the gateway refuses the connection beyond its per-address share (64 of its 1024,
// httplimits) with 503 "too many connections from this address".
async function measureHTTPMany(name) {
  const gw = await startHTTPGateway("http-sessions");
  const clients = [];
  try {
    for (const c of await Promise.allSettled(Array.from({ length: sessions }, () => httpClient(gw.url, undefined, false)))) {
      if (c.status === "rejected") throw c.reason;
      clients.push(c.value);
    }
    await Promise.all(clients.map(async (cl) => { for (let i = 0; i < 10; i++) await callOnce(cl); }));
    const per = Math.max(1, Math.floor(calls / sessions));
    const lat = [];
    const cpu0 = cpuMicros(gw.proc.pid);
    const sys0 = cpuTimes(gw.proc.pid).sys;
    const ctx0 = ctxSwitches(gw.proc.pid);
    const t0 = process.hrtime.bigint();
    await Promise.all(clients.map(async (cl) => {
      for (let i = 0; i < per; i++) {
        const t = process.hrtime.bigint();
        await callOnce(cl);
        lat.push(Number(process.hrtime.bigint() - t) / 1e6);
      }
    }));
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    lat.sort((a, b) => a - b);
    const many = { name, p50: pct(lat, 50), p99: pct(lat, 99), callsPerSec: lat.length / secs,
      cpuPerCallMicros: (cpuMicros(gw.proc.pid) - cpu0) / lat.length, sysPerCallMicros: (cpuTimes(gw.proc.pid).sys - sys0) / lat.length,
      ctxPerCall: (ctxSwitches(gw.proc.pid) - ctx0) / lat.length };
    log(`  ${many.name}: ${many.callsPerSec.toFixed(0)} receipts/s, p50 ${many.p50.toFixed(2)} ms, p99 ${many.p99.toFixed(2)} ms, gateway CPU ${many.cpuPerCallMicros.toFixed(0)} µs/call (${many.sysPerCallMicros.toFixed(0)} in the kernel), ${many.ctxPerCall.toFixed(1)} context switches/call`);
    return many;
  } finally {
    await Promise.allSettled(clients.map((cl) => cl.close()));
    await stopProc(gw.proc);
  }
}

// The variants, in the first round's order; each runs with fresh processes.
const variants = [{ name: "direct (stdio)", run: (n) => measureStdio(n, process.execPath, [fsServer, data], false) }];
if (peer) {
  variants.push({ name: `peer: ${fill(peer[0]).split("/").pop()} (stdio)`.slice(0, 40), run: (n) => measureStdio(n, fill(peer[0]), peer.slice(1).map((a) => fill(a))) });
}
variants.push({ name: "svc gateway (stdio)", run: (n) => measureStdio(n, svc, ["gateway", "--config", config, ...profileArgs("stdio")]) });
if (remoteLog) {
  variants.push({ name: "svc gateway (stdio, log over HTTP)", run: (n) => measureRemote(n, (url) => ({ url: `${url}/append` })) });
  variants.push({ name: "svc gateway (stdio, log over NATS)", run: (n) => measureRemote(n, (_url, natsPort) => ({ nats: `nats://svc:${natsPassword}@127.0.0.1:${natsPort}` })) });
}
if (peerHTTP) variants.push({ name: `peer: ${fill(peerHTTP[0]).split("/").pop()} (HTTP)`.slice(0, 40), run: measurePeerHTTP });
variants.push({ name: "svc gateway --http (1 session)", run: measureHTTPOne });
variants.push({ name: `svc gateway --http (${sessions} sessions)`, run: measureHTTPMany });

// byRound[r][name] is the row of variant name in round r; loads[r] the load average at its end.
const byRound = [];
const loads = [];
try {
  log(`${calls} calls of read_text_file per variant, ${inflight} in flight for the throughput figure, ${rounds} rounds round-robin; receipts under ${dir}`);
  for (let r = 0; r < rounds; r++) {
    const order = variants.map((_, k) => variants[(r + k) % variants.length]);
    log(`round ${r + 1} of ${rounds}: ${order.map((v) => v.name).join(", ")}`);
    const got = {};
    for (const v of order) got[v.name] = await v.run(v.name);
    byRound.push(got);
    loads.push(loadavg()[0]);
    log(`  load average (1 min) at the end of round ${r + 1}: ${loads[r].toFixed(2)}`);
  }
} finally {
  // Retried: a process that outlived its variant (a failed one's upstream) may still
  // add a file while the tree is removed (ENOTEMPTY), which would hide the failure.
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
  } catch (e) {
    log(`could not remove ${dir}: ${e.message}`);
  }
}

const median = (xs) => {
  const a = xs.filter((x) => !Number.isNaN(x)).sort((x, y) => x - y);
  if (a.length === 0) return NaN;
  return a.length % 2 ? a[(a.length - 1) / 2] : (a[a.length / 2 - 1] + a[a.length / 2]) / 2;
};
const spread = (xs, digits) => `${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)}`;
const direct = variants[0].name;
const fields = ["p50", "p99", "callsPerSec", "cpuPerCallMicros", "sysPerCallMicros", "ctxPerCall", "pingP50"];
const rows = variants.map((v) => {
  const each = byRound.map((g) => g[v.name]);
  const row = { name: v.name, rounds: each };
  for (const f of fields) row[f] = median(each.map((x) => (x[f] === undefined ? NaN : x[f])));
  // Ratios to direct are taken within each round (the same box, minutes apart).
  row.vsDirect = byRound.map((g) => g[v.name].callsPerSec / g[direct].callsPerSec);
  row.addedP50 = byRound.map((g) => g[v.name].p50 - g[direct].p50);
  return row;
});

if (asJSON) {
  console.log(JSON.stringify({ rounds, loadAverages: loads, rows }, null, 2));
} else {
  console.log(`median of ${rounds} rounds (round-robin order), spread min-max in brackets; load average (1 min) at each round's end: ${loads.map((l) => l.toFixed(2)).join(", ")}`);
  console.log("variant                                   p50 ms [spread]         p99 ms  added p50  calls/s [spread]    vs direct [spread]  gateway CPU µs/call  of which kernel  ctx sw/call  ping p50");
  for (const r of rows) {
    const isDirect = r.name === direct;
    const p50 = `${r.p50.toFixed(2)} [${spread(r.rounds.map((x) => x.p50), 2)}]`;
    const cps = `${r.callsPerSec.toFixed(0)} [${spread(r.rounds.map((x) => x.callsPerSec), 0)}]`;
    const added = isDirect ? "" : median(r.addedP50).toFixed(2);
    const ratio = isDirect ? "" : `${median(r.vsDirect).toFixed(2)} [${spread(r.vsDirect, 2)}]`;
    const cpu = Number.isNaN(r.cpuPerCallMicros) ? "" : r.cpuPerCallMicros.toFixed(0);
    const sys = Number.isNaN(r.sysPerCallMicros) ? "" : r.sysPerCallMicros.toFixed(0);
    const ctx = Number.isNaN(r.ctxPerCall) ? "" : r.ctxPerCall.toFixed(1);
    const ping = Number.isNaN(r.pingP50) ? "" : r.pingP50.toFixed(2).padStart(8);
    console.log(`${r.name.padEnd(40)} ${p50.padEnd(22)}  ${r.p99.toFixed(2).padStart(7)}  ${added.padStart(9)}  ${cps.padEnd(18)}  ${ratio.padEnd(18)}  ${cpu.padStart(19)}  ${sys.padStart(15)}  ${ctx.padStart(11)}  ${ping}`);
  }
}
process.exit(0);
