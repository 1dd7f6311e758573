package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime/debug"
	"strings"

	"svc.dev/svc/gateway"
)

func init() {
	register("gateway", "run the MCP gateway between an agent and its tools", runGateway)
}

const gatewayHelp = `Runs the MCP gateway: an out-of-process proxy between an untrusted agent and its tools.
It shows the agent only the tools its grant names, checks the grant, looks up the facts
the policy needs, evaluates the Cedar policy, logs a signed authorization first for
pre-committed tools, forwards or refuses the call, and issues a signed receipt whose
hash goes to the log. Refusals are tool errors, never protocol errors.

Over stdio (the default) it serves the grant in the config's grantFile; stdout carries
only MCP and every diagnostic goes to stderr. With --http, every request presents its
grant (Authorization: Bearer <base64url grant> or X-Svc-Grant); a request naming a
session must present that session's grant, and an expired grant is refused (403) even
mid-session. When the grant names an agentKey, every request must also carry a proof
of possession signed with that key:

  X-Svc-Proof: t=<unix seconds>, sig=<base64url Ed25519 signature>

over "svc-proof-v1\n<METHOD>\n<path>\n<Mcp-Session-Id or empty>\n<t>\n<hex SHA-256 of
the body>"; t within 5 minutes of the gateway's clock, each signature accepted once.
--require-proof refuses grants without agentKey, so a grant copied out of a receipt is
useless without the agent's key. HTTP limits: headers within 10 s, a body (at most
4 MiB, 413 beyond) within 30 s, an answer within 5 min, 1024 connections at once.

The config file is JSON (SPEC.md, "Gateway config"); relative paths resolve against it.

Receipts: with a local logFile a receipt is durable in the log file before the agent
sees the result, and its file receiptsDir/<id>.json follows, normally within 20 ms;
at start the gateway rebuilds from the log any receipt file a crash lost. With a
remote log the file is written and fsynced before the result is returned. Stopping
the gateway (stdin closed, SIGINT, SIGTERM) writes every pending file first.

Example:
  examples/gateway/setup.sh && svc gateway --config examples/gateway/gateway.json`

func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gateway", "--config <file> [--http --port --host --idle-minutes --require-proof --otlp-metrics --cpuprofile]", gatewayHelp, stderr)
	config := fs.String("config", "", "the gateway config `file` (JSON)")
	httpMode := fs.Bool("http", false, "serve MCP Streamable HTTP on /mcp instead of stdio")
	host := fs.String("host", "127.0.0.1", "HTTP mode: `address` to listen on (plain HTTP: loopback, a private network, or TLS in front)")
	port := fs.Int("port", 8090, "HTTP mode: `port` (0: any free port)")
	idle := fs.Int("idle-minutes", 30, "HTTP mode: close a session after this many `minutes` without a request")
	requireProof := fs.Bool("require-proof", false, "HTTP mode: refuse grants without agentKey; every request then carries X-Svc-Proof")
	var origins originList
	fs.Var(&origins, "allow-origin", "HTTP mode: a browser origin (scheme://host[:port]) allowed besides the gateway's own; repeat for more. Requests with any other Origin header get 403")
	otlpMetrics := fs.String("otlp-metrics", "", "push the gateway's metrics (svc.gateway.tool_definitions.changes, docs/design/telemetry.md) every 15 s and at exit over OTLP/HTTP to this `URL` (e.g. http://collector:4318/v1/metrics)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the gateway to `file` until it stops (performance work)")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	// The gateway's live heap is small (a few megabytes) and every call allocates
	// kilobytes of JSON: at the default GOGC the collector runs every few hundred calls
	// and took several percent of the gateway's CPU. GOGC set in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if *config == "" {
		return usagef("--config is required")
	}
	if *idle <= 0 {
		return usagef("--idle-minutes must be positive")
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	tel, err := gatewayTelemetry(*otlpMetrics)
	if err != nil {
		return err
	}
	defer flushTelemetry(tel, logger)
	g, err := openGateway(ctx, *config, !*httpMode, logger, gateway.Options{OnToolChanged: tel.ToolDefinitionChanged})
	if err != nil {
		if *httpMode {
			return err
		}
		return refuseStdio(err, stdout, stderr)
	}
	defer g.Close()
	if *httpMode {
		return g.ServeHTTP(ctx, gateway.HTTPConfig{Host: *host, Port: *port, IdleMinutes: *idle, RequireProof: *requireProof, AllowedOrigins: origins}, func(addr string) {
			logger.Info("gateway listening", "addr", addr, "keyid", g.KeyID())
		})
	}
	err = g.ServeStdio(ctx, gateway.PollableInput(os.Stdin), stdout, stderr)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		logger.Info("gateway stopping: signal")
		return nil // SIGINT or SIGTERM: a normal stop
	}
	return err
}

// openGateway loads the config and starts the gateway; over stdio it also checks
// the grant.
func openGateway(ctx context.Context, config string, stdio bool, logger *slog.Logger, opts gateway.Options) (*gateway.Gateway, error) {
	cfg, err := gateway.LoadConfig(config)
	if err != nil {
		return nil, err
	}
	opts.LoadPolicy, opts.Logger = gateway.CedarPolicy, logger
	g, err := gateway.New(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	if stdio {
		if err := g.CheckGrant(); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

// refuseStdio reports a stdio gateway that could not start: the error on stderr
// first, then, when stdin is not a terminal (an MCP client spawned it), the answer
// to the client's initialize is a JSON-RPC error with the same text, which the
// client shows rather than "Connection closed". Exit status 1.
func refuseStdio(cause error, stdout, stderr io.Writer) error {
	fmt.Fprintf(stderr, "svc gateway: %v\n", cause)
	if st, err := os.Stdin.Stat(); err == nil && st.Mode()&os.ModeCharDevice == 0 {
		if err := gateway.RefuseStdio(os.Stdin, stdout, cause); err != nil {
			fmt.Fprintf(stderr, "svc gateway: answering the client: %v\n", err)
		}
	}
	return exitCode(1)
}

// originList is the repeatable --allow-origin flag.
type originList []string

func (o *originList) String() string { return strings.Join(*o, ",") }

func (o *originList) Set(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("--allow-origin %q: want an origin, scheme://host[:port], e.g. https://app.example.com", v)
	}
	*o = append(*o, strings.TrimSuffix(v, "/"))
	return nil
}
