package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"svc.dev/svc/exporters"
	"svc.dev/svc/httplimits"
	"svc.dev/svc/sdk"
	"svc.dev/svc/sidecar"
)

func init() {
	register("serve", "run the sidecar: the SDK issuer's local HTTP API", runServe)
}

const serveHelp = `Runs the sidecar: the SDK issuer behind a local HTTP API, so an agent written in any
language records its tool calls and gets signed receipts back. Everything it records is
claimed by the agent's own process (issuer.kind sdk). Routes:

  GET  /health   { agentId, keyid, log: { kind, where } }
  POST /decide   ToolEvent { tool, args, model?, session? } -> PolicyDecision, or null
                 when the config names no policy; records nothing
  POST /record   { event, outcome, policy? } -> the receipt bundle as written to
                 <receiptsDir>/<id>.json; 502 when the log would not take the leaf.
                 policy is what /decide returned; without it the receipt's policy
                 is null (the sidecar never decides on the caller's behalf)

--config is the SDK config file (docs/sdk-config.md): the issuer key, agent id,
framework, optional Cedar policy, receipts directory, exactly one of logFile or log,
and optional otel and splunk exporters. POST bodies must be application/json.

On SIGTERM or Ctrl-C the sidecar stops taking requests, then waits up to --export-drain
(default 30s) for receipts still queued for the otel and splunk exporters; what is left
after that is dropped with a line each on stderr (with a log over NATS, exports are
durable in the broker and resume after a restart). Limits: headers within 10 s, a body
(at most 1 MiB) within 30 s, an answer within 2 min, idle connections closed after
2 min, at most 1024 connections at once.

The sidecar has no authentication: it binds to loopback. --host with any other address
is refused unless --allow-remote is given, which prints a warning; anyone who can reach
the port can then record receipts in the agent's name.

Example:
  svc serve --config sidecar.json --port 8790
  curl -s -H 'Content-Type: application/json' -d '{"event":{"tool":"search","args":{"q":"x"}},"outcome":{"status":"executed","result":"ok"}}' http://127.0.0.1:8790/record`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "--config <file> [--port <p>] [--host <h>] [--allow-remote]", serveHelp, stderr)
	config := fs.String("config", "", "the SDK config `file` (required)")
	port := fs.Int("port", 8790, "`port` to listen on (0: any free port)")
	host := fs.String("host", "127.0.0.1", "`address` to listen on; loopback unless --allow-remote")
	allowRemote := fs.Bool("allow-remote", false, "allow a non-loopback --host (the sidecar has no authentication)")
	drain := fs.Duration("export-drain", exporters.DefaultDrain, "on stop, how long to wait for receipts still queued for export before dropping them (a `duration`)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if *config == "" {
		return usagef("--config is required (the SDK config file; see docs/sdk-config.md)")
	}
	if *port < 0 || *port > 65535 {
		return usagef("--port %d: want 0 to 65535", *port)
	}
	loopback := sidecar.LoopbackHost(*host)
	if !loopback && !*allowRemote {
		return usagef("--host %q is not a loopback address; the sidecar has no authentication, so it binds to loopback (127.0.0.1, ::1, localhost). Pass --allow-remote to bind elsewhere anyway", *host)
	}
	if !loopback {
		fmt.Fprintf(stderr, "svc serve: WARNING: listening on %s, not loopback: the sidecar has no authentication; anyone who can reach this port can record receipts signed with this agent's key\n", *host)
	}
	is, err := sdk.OpenFile(ctx, *config, sdk.OpenOptions{Stderr: stderr})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), *drain)
		defer cancel()
		_ = is.Close(cctx)
	}()
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lim := httplimits.Default() // headers 10 s, body 30 s, answer 2 min, idle 2 min, 1024 connections
	srv := lim.Server(sidecar.New(is, sidecar.Options{Remote: !loopback, Logger: logger}))
	ln = lim.Listener(ln)
	h := is.Health()
	fmt.Fprintf(stdout, "sidecar listening on http://%s\n", ln.Addr())
	fmt.Fprintf(stdout, "  agent %s, issuer keyid %s, %s log %s\n", h.AgentID, h.KeyID, h.Log.Kind, h.Log.Where)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
