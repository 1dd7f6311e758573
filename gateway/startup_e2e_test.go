package gateway_test

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
)

// TestGatewayTokenEnvUnderMCPClient (issue 29, point 9): the official TypeScript SDK
// client starts the gateway with only a few of its environment variables, so a
// log.tokenEnv set in the agent's shell does not reach it. The client then shows the
// gateway's own error (variable and fix) instead of "Connection closed"; with the
// variable in the client's "env" the same gateway serves.
func TestGatewayTokenEnvUnderMCPClient(t *testing.T) {
	l := logtest.Start(t, logtest.Options{})
	f := newFixture(t, func(c map[string]any) {
		delete(c, "logFile")
		c["log"] = map[string]any{"url": l.URL + "/append", "tokenEnv": "SVC_E2E_LOG_TOKEN"}
	})
	t.Setenv("SVC_E2E_LOG_TOKEN", "tok") // in the test's environment, as in the agent's shell
	sc := map[string]any{"transport": "stdio", "command": svcBin, "args": []string{"gateway", "--config", f.config},
		"calls": []map[string]any{{"name": "echo", "arguments": map[string]any{"message": "hi"}}}}
	run := runAgent(t, sc)
	for _, want := range []string{"svc gateway cannot start", "log.tokenEnv", "SVC_E2E_LOG_TOKEN", `"env": {"SVC_E2E_LOG_TOKEN"`} {
		if !strings.Contains(run.ConnectError, want) {
			t.Fatalf("the client's error %q lacks %q", run.ConnectError, want)
		}
	}
	sc["env"] = map[string]string{"SVC_E2E_LOG_TOKEN": "tok"}
	run = runAgent(t, sc)
	if run.ConnectError != "" || len(run.Results) != 1 || text(run.Results[0]) != "Echo: hi" {
		t.Fatalf("with the variable in the client's env: %+v", run)
	}
	receiptID(t, run.Results[0])
}

// TestGatewayQuietShutdown (issue 29, point 11): a normal stop (SIGTERM, as the
// TypeScript SDK client sends after closing stdin; or stdin closed) exits 0 and logs
// no ERROR; it used to log mcp-go's "Error reading from stdout ... closed pipe" for
// the stdio upstream, and exit 1 with "context canceled".
func TestGatewayQuietShutdown(t *testing.T) {
	f := newFixture(t, nil)
	cmd := exec.Command(svcBin, "gateway", "--config", f.config)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr testkit.LockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := startMCPClient(t, client.NewClient(transport.NewIO(stdout, stdin, nil)))
	if _, err := c.ListTools(context.Background(), mcp.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gateway exit: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "level=ERROR") {
		t.Fatalf("a normal shutdown logged an error:\n%s", stderr.String())
	}
}
