package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway"
)

// BenchmarkAddedLatency measures a tool call made directly to an MCP upstream and the
// same call through the gateway (scope, policy, receipt signed, logged and written to
// disk), with a local log file and with a remote log server, and reports the added
// latency at p50 and p99.
//
//	go test -run '^$' -bench AddedLatency -benchtime 1000x ./gateway/
func BenchmarkAddedLatency(b *testing.B) {
	up := startRecordingUpstream(b)
	direct, err := client.NewStreamableHttpClient(up.url)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	if err := direct.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := direct.Initialize(context.Background(), init); err != nil {
		b.Fatal(err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "lookup"
	req.Params.Arguments = map[string]any{"q": "x"}
	for _, mode := range []string{"local-log", "remote-log"} {
		b.Run(mode, func(b *testing.B) {
			f := newFixture(b, func(cfg map[string]any) {
				cfg["upstream"] = map[string]any{"url": up.url}
				delete(cfg, "facts")
				if mode == "remote-log" {
					_, proxy := startLog(b)
					delete(cfg, "logFile")
					cfg["log"] = map[string]any{"url": proxy.ts.URL + "/append"}
				}
			})
			os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
			f.writeGrant(b, "grant.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)
			cfg, err := gateway.LoadConfig(f.config)
			if err != nil {
				b.Fatal(err)
			}
			g, err := gateway.New(context.Background(), cfg, gateway.Options{LoadPolicy: gateway.CedarPolicy})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			grant, _ := cfg.LoadGrant()
			s, err := g.NewSession("", grant)
			if err != nil {
				b.Fatal(err)
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
				if r := g.Call(context.Background(), s, "lookup", json.RawMessage(`{"q":"x"}`), nil); r.IsError {
					b.Fatal(r.Content)
				}
				d2 = append(d2, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(d1)
			slices.Sort(d2)
			p := func(d []time.Duration, q int) float64 { return float64(d[min(len(d)*q/100, len(d)-1)].Microseconds()) }
			b.ReportMetric(p(d1, 50), "direct-p50-µs")
			b.ReportMetric(p(d2, 50), "gateway-p50-µs")
			b.ReportMetric(p(d2, 50)-p(d1, 50), "added-p50-µs")
			b.ReportMetric(p(d2, 99)-p(d1, 99), "added-p99-µs")
		})
	}
}
