package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/internal/testkit"
)

// logSink collects the log messages an agent receives.
type logSink struct {
	mu   sync.Mutex
	msgs []string // level + " " + data
}

func (l *logSink) listen(c *client.Client) {
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != "notifications/message" {
			return
		}
		level, _ := n.Params.AdditionalFields["level"].(string)
		data, _ := n.Params.AdditionalFields["data"].(string)
		l.mu.Lock()
		l.msgs = append(l.msgs, level+" "+data)
		l.mu.Unlock()
	})
}

func (l *logSink) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.msgs))
}

// atLeast is the messages of msgs at level min or above.
func atLeast(msgs []string, min mcp.LoggingLevel) []string {
	var out []string
	for _, m := range msgs {
		level, _, _ := strings.Cut(m, " ")
		if mcp.LoggingLevel(level).ShouldSendTo(min) {
			out = append(out, m)
		}
	}
	return out
}

// startLegacyClient starts and initializes c on the revision before 2026-07-28, whose
// sessions take logging/setLevel (the stateless revision declares a level per request
// and has no session for log messages outside a call).
func startLegacyClient(t *testing.T, c *client.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	if r, err := c.Initialize(context.Background(), init); err != nil || r.ProtocolVersion != mcp.LATEST_LEGACY_PROTOCOL_VERSION {
		t.Fatalf("initialize: %v %+v", err, r)
	}
}

// TestGatewayRelaysStdioUpstreamLogs: a stdio upstream's log messages (the npm
// server-everything's simulated logging, a message of a random level every 5 s,
// started by its toggle-simulated-logging tool) name no call; the gateway relays each
// to the agent sessions whose grant names a tool of that upstream, filtered by each
// session's logging/setLevel (error when it set none), over the HTTP front's
// standalone streams. A session whose grant names none of the upstream's tools gets
// none.
func TestGatewayRelaysStdioUpstreamLogs(t *testing.T) {
	const tool = "toggle-simulated-logging"
	f := newFixture(t, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`permit (principal, action, resource);`), 0o644)
	addr := testkit.StartProcess(t, exec.Command(svcBin, "gateway", "--config", f.config, "--http", "--port", "0"), regexp.MustCompile(`msg="gateway listening" addr=(\S+)`))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	agent := func(name string, scopes []string, level mcp.LoggingLevel) (*client.Client, *logSink) {
		grant := f.writeGrant(t, name+".json", scopes, time.Now().Add(-time.Minute), time.Hour, nil)
		//lint:ignore SA1019 the agent is on 2025-11-25, whose log messages come on the standalone stream
		tr, err := transport.NewStreamableHTTP("http://"+addr+"/mcp", transport.WithHTTPHeaders(map[string]string{"X-Svc-Grant": grantHeader(grant)}), transport.WithContinuousListening())
		if err != nil {
			t.Fatal(err)
		}
		sink := &logSink{}
		c := client.NewClient(tr)
		sink.listen(c)
		startLegacyClient(t, c)
		t.Cleanup(func() { c.Close() })
		if level != "" {
			//lint:ignore SA1019 logging/setLevel is the 2025-11-25 agent's, which this test relays to
			if err := c.SetLevel(ctx, mcp.SetLevelRequest{Params: mcp.SetLevelParams{Level: level}}); err != nil {
				t.Fatalf("%s: logging/setLevel: %v", name, err)
			}
		}
		return c, sink
	}
	debug, debugLogs := agent("debug", []string{tool}, mcp.LoggingLevelDebug)
	_, defaultLogs := agent("default", []string{tool, "echo"}, "")
	_, otherLogs := agent("other", []string{"a-tool-no-upstream-offers"}, mcp.LoggingLevelDebug)
	time.Sleep(time.Second) // the standalone streams open
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	if res, err := debug.CallTool(ctx, req); err != nil || res.IsError {
		t.Fatalf("%s: %v %+v", tool, err, res)
	}
	time.Sleep(16 * time.Second) // the first message at once, then one every 5 s
	all := debugLogs.got()
	if len(all) < 3 {
		t.Fatalf("the debug session got %d log messages in 16 s, want at least 3: %q", len(all), all)
	}
	t.Logf("the debug session got %q", all)
	if got, want := defaultLogs.got(), atLeast(all, mcp.LoggingLevelError); !slices.Equal(got, want) {
		t.Fatalf("the session without logging/setLevel got %q, want those of error and above: %q", got, want)
	}
	if got := otherLogs.got(); len(got) != 0 {
		t.Fatalf("a session whose grant names none of the upstream's tools got its log messages: %q", got)
	}
}

// TestGatewayStdioFrontRelaysUpstreamLogs: the same over the stdio front, the agent
// at logging/setLevel debug.
func TestGatewayStdioFrontRelaysUpstreamLogs(t *testing.T) {
	const tool = "toggle-simulated-logging"
	f := newFixture(t, nil)
	f.writeGrant(t, "grant.json", []string{tool}, time.Now().Add(-time.Minute), time.Hour, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`permit (principal, action, resource);`), 0o644)
	sink := &logSink{}
	cmd, stdin, stdout := startGatewayProcess(t, f.config, os.Stderr)
	defer cmd.Process.Kill()
	c := client.NewClient(transport.NewIO(stdout, stdin, nil))
	sink.listen(c)
	startLegacyClient(t, c)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	//lint:ignore SA1019 logging/setLevel is the 2025-11-25 agent's, which this test relays to
	if err := c.SetLevel(ctx, mcp.SetLevelRequest{Params: mcp.SetLevelParams{Level: mcp.LoggingLevelDebug}}); err != nil {
		t.Fatal(err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	if res, err := c.CallTool(ctx, req); err != nil || res.IsError {
		t.Fatalf("%s: %v %+v", tool, err, res)
	}
	time.Sleep(11 * time.Second)
	if got := sink.got(); len(got) < 2 {
		t.Fatalf("the agent got %d log messages in 11 s, want at least 2: %q", len(got), got)
	}
}
