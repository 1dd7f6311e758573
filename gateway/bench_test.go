package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/natsembed"
)

// BenchmarkAddedLatency measures a tool call made directly to an MCP upstream (an
// mcp-go client over Streamable HTTP) and the same call through the gateway (scope,
// policy, receipt signed and logged; the bundle file written), interleaved, and
// reports the added latency at p50 and p99 (the difference of the two percentiles)
// with the percentiles themselves:
//
//   - local-log: the gateway's call path in process, log file on local disk;
//
//   - remote-log: the same with the log service (HTTP, embedded NATS) on this machine;
//
//   - remote-log-nats: the same with the gateway appending over NATS (log.nats) to the
//     log service's pipeline;
//
//   - local-log-stdio-front: the agent's view of the default deployment, an mcp-go
//     client talking to the gateway's stdio front end (over pipes), which adds the
//     agent-to-gateway hop;
//
//   - local-log-http-front: the same over the gateway's Streamable HTTP front end, with
//     a client of the 2026-07-28 revision (no session: the grant on every request).
//
//     go test -run '^$' -bench AddedLatency -benchtime 3000x ./gateway/
func BenchmarkAddedLatency(b *testing.B) {
	up := startRecordingUpstream(b)
	direct := mcpClient(b, up.url, nil)
	req := mcp.CallToolRequest{}
	req.Params.Name = "lookup"
	req.Params.Arguments = map[string]any{"q": "x"}
	for _, mode := range []string{"local-log", "remote-log", "remote-log-nats", "local-log-stdio-front", "local-log-http-front"} {
		b.Run(mode, func(b *testing.B) {
			f := newFixture(b, func(cfg map[string]any) {
				cfg["upstream"] = map[string]any{"url": up.url}
				delete(cfg, "facts")
				switch mode {
				case "remote-log":
					_, proxy := startLog(b)
					delete(cfg, "logFile")
					cfg["log"] = map[string]any{"url": proxy.ts.URL + "/append"}
				case "remote-log-nats":
					broker, err := natsembed.Start(natsembed.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:-1", Password: "pw-of-tests"})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(broker.Shutdown)
					logtest.Start(b, logtest.Options{NATSURL: natsembed.URL(broker, "pw-of-tests"), Tenants: []logtest.Tenant{{ID: "fleet", LogID: "fleet-log"}}})
					delete(cfg, "logFile")
					cfg["log"] = map[string]any{"nats": natsembed.URL(broker, "pw-of-tests"), "tenant": "fleet"}
				}
			})
			os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
			grant := f.writeGrant(b, "grant.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)
			cfg, err := gateway.LoadConfig(f.config)
			if err != nil {
				b.Fatal(err)
			}
			g, err := gateway.New(context.Background(), cfg, gateway.Options{LoadPolicy: gateway.CedarPolicy})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			var viaGateway func() bool // reports whether the call failed
			switch mode {
			case "local-log-stdio-front":
				toGateway, fromAgent := io.Pipe()
				toAgent, fromGateway := io.Pipe()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go g.ServeStdio(ctx, toGateway, fromGateway, io.Discard)
				c := startMCPClient(b, client.NewClient(transport.NewIO(toAgent, fromAgent, nil)))
				defer c.Close()
				viaGateway = func() bool {
					r, err := c.CallTool(context.Background(), req)
					return err != nil || r.IsError
				}
			case "local-log-http-front":
				ts := httptest.NewServer(g.Handler(gateway.HTTPConfig{}))
				defer ts.Close()
				c := mcpClient(b, ts.URL+"/mcp", map[string]string{"X-Svc-Grant": grantHeader(grant)})
				viaGateway = func() bool {
					r, err := c.CallTool(context.Background(), req)
					return err != nil || r.IsError
				}
			default:
				s, err := g.NewSession("", grant)
				if err != nil {
					b.Fatal(err)
				}
				viaGateway = func() bool {
					return g.Call(context.Background(), s, "lookup", json.RawMessage(`{"q":"x"}`), nil).IsError
				}
			}
			n := max(b.N, 50)
			var d1, d2 []time.Duration
			b.ResetTimer()
			for i := 0; i < n; i++ { // interleaved, so both see the same machine
				t0 := time.Now()
				if _, err := direct.CallTool(context.Background(), req); err != nil {
					b.Fatal(err)
				}
				d1 = append(d1, time.Since(t0))
				t0 = time.Now()
				if viaGateway() {
					b.Fatal("the call through the gateway failed")
				}
				d2 = append(d2, time.Since(t0))
			}
			b.StopTimer()
			if err := g.Flush(); err != nil {
				b.Fatal(err)
			}
			slices.Sort(d1)
			slices.Sort(d2)
			p := func(d []time.Duration, q int) float64 { return float64(d[min(len(d)*q/100, len(d)-1)].Microseconds()) }
			b.ReportMetric(p(d1, 50), "direct-p50-µs")
			b.ReportMetric(p(d1, 99), "direct-p99-µs")
			b.ReportMetric(p(d2, 50), "gateway-p50-µs")
			b.ReportMetric(p(d2, 99), "gateway-p99-µs")
			b.ReportMetric(p(d2, 50)-p(d1, 50), "added-p50-µs")
			b.ReportMetric(p(d2, 99)-p(d1, 99), "added-p99-µs")
		})
	}
}

// mcpClient connects an mcp-go client over Streamable HTTP and initializes it.
func mcpClient(b *testing.B, url string, headers map[string]string) *client.Client {
	b.Helper()
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(headers))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return startMCPClient(b, c)
}

// startMCPClient starts an mcp-go client and initializes it at the latest revision.
func startMCPClient(t testing.TB, c *client.Client) *client.Client {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	return c
}
