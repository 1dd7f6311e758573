package gateway_test

import (
	"strings"
	"testing"

	"svc.dev/svc/internal/logtest"
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
