package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
)

// startRugpullHTTP runs e2e/rugpull-server.mjs over Streamable HTTP with env added and
// returns its URL.
func startRugpullHTTP(t *testing.T, env ...string) string {
	t.Helper()
	return startNodeHTTP(t, "rugpull-server.mjs", env...)
}

// startNodeHTTP runs e2e/<script> --http (a server that prints {"port": N} once it
// listens on 127.0.0.1) with env added, until the test ends, and returns its /mcp URL.
func startNodeHTTP(t *testing.T, script string, env ...string) string {
	t.Helper()
	nodeModules(t)
	srv := exec.Command("node", filepath.Join(repoDir, "e2e", script), "--http")
	srv.Env = append(os.Environ(), env...)
	stdout, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	var listening struct {
		Port int `json:"port"`
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &listening) != nil || listening.Port == 0 {
		t.Fatalf("%s --http: %q, %v", script, line, err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", listening.Port)
}

// growFixture is a gateway in front of upstreams (name → upstream config), every call
// permitted, under a grant of scopes.
func growFixture(t *testing.T, scopes []string, upstreams map[string]map[string]any) *fixture {
	t.Helper()
	nodeModules(t)
	f := keyedFixture(t)
	f.writeGrant(t, "grant.json", scopes, time.Now().Add(-time.Minute), 24*time.Hour, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`permit (principal, action, resource);`), 0o644)
	var ups []map[string]any
	for _, name := range slices.Sorted(maps.Keys(upstreams)) {
		upstreams[name]["name"] = name
		ups = append(ups, upstreams[name])
	}
	f.writeConfig(map[string]any{
		"identity": map[string]any{"keyFile": "gateway.key"}, "upstreams": ups,
		"grantFile": "grant.json", "trustedPrincipalKeys": []string{"alice.pub"}, "policyFile": "policy.cedar",
		"receiptsDir": "receipts", "logFile": "receipts.log",
	})
	return f
}

// agentOver is the scenario of an agent (the official TypeScript SDK client) talking
// to f's gateway over front ("stdio", or "http": the gateway started here).
func agentOver(t *testing.T, f *fixture, front string, calls []any) map[string]any {
	t.Helper()
	if front == "stdio" {
		return map[string]any{"transport": "stdio", "command": svcBin, "args": []string{"gateway", "--config", f.config}, "calls": calls}
	}
	addr := testkit.StartProcess(t, exec.Command(svcBin, "gateway", "--config", f.config, "--http", "--port", "0"), regexp.MustCompile(`msg="gateway listening" addr=(\S+)`))
	grant, err := os.ReadFile(filepath.Join(f.dir, "grant.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env receipt.Envelope
	if err := json.Unmarshal(grant, &env); err != nil {
		t.Fatal(err)
	}
	return map[string]any{"transport": "http", "url": "http://" + addr + "/mcp", "grant": grantHeader(&env), "calls": calls}
}

// TestToolAddedAfterStartIsRouted: an upstream (the official TypeScript SDK, over
// stdio and over Streamable HTTP) adds two tools after the gateway started and says
// so with notifications/tools/list_changed. The agent (the official TypeScript SDK
// client, over the stdio and the HTTP front) is told once, for the tool its grant
// names and not for the other; its next tools/list shows the granted one only, and
// calling it reaches the upstream, with a receipt that verifies and cites the new
// tool's logged definition.
func TestToolAddedAfterStartIsRouted(t *testing.T) {
	for _, tc := range []struct{ name, upstream, front string }{
		{"stdio upstream, stdio front", "stdio", "stdio"},
		{"http upstream, http front", "http", "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := map[string]any{"command": "node", "args": []string{filepath.Join(repoDir, "e2e", "rugpull-server.mjs")}, "env": map[string]string{"GROW": "1"}}
			if tc.upstream == "http" {
				up = map[string]any{"url": startRugpullHTTP(t, "GROW=1")}
			}
			f := growFixture(t, []string{"echo", "grow", "late"}, map[string]map[string]any{"rugpull": up})
			run := runAgent(t, agentOver(t, f, tc.front, []any{
				map[string]any{"name": "grow", "arguments": map[string]any{"name": "hidden"}},
				map[string]any{"name": "grow", "arguments": map[string]any{"name": "late"}},
				map[string]any{"waitListChanged": true},
				map[string]any{"list": true},
				map[string]any{"name": "late"},
			}))
			if len(run.WaitErrors) > 0 || run.ListChanged != 1 {
				t.Fatalf("list_changed: %d received (want 1: for late, not hidden), %v", run.ListChanged, run.WaitErrors)
			}
			if want := []string{"echo", "grow"}; !slices.Equal(run.Tools, want) {
				t.Fatalf("tools/list at start: %v, want %v", run.Tools, want)
			}
			if want := []string{"echo", "grow", "late"}; len(run.Lists) != 1 || !slices.Equal(run.Lists[0], want) {
				t.Fatalf("tools/list after list_changed: %v, want %v (hidden is not granted)", run.Lists, want)
			}
			late := run.Results[2]
			if late.IsError || text(late) != "late answered" {
				t.Fatalf("late: %+v", late)
			}
			id := receiptID(t, late)
			waitForReceipts(t, f, 3)
			if rep := verifyAll(t, f)[id]; !strings.Contains(rep, "RESULT: VERIFIED") {
				t.Fatalf("svc verify of late's receipt: %s", rep)
			}
			_, p := readReceipt(t, filepath.Join(f.dir, "receipts", id+".json"))
			if p.Tool.Name != "late" || p.Tool.DefinitionLeafIndex == nil || p.Tool.DefinitionDigest == "" {
				t.Fatalf("late's receipt does not cite its logged definition: %+v", p.Tool)
			}
		})
	}
}

// TestToolCollidingAfterStartIsNotRouted: two upstreams, and after start the second
// adds a tool with the name of one of the first's. SPEC's one-owner rule holds: the
// name is routed to neither (tools/list leaves it out, a call is denied with a
// receipt saying which upstreams offer it), while the first's other tools still work.
func TestToolCollidingAfterStartIsNotRouted(t *testing.T) {
	server := filepath.Join(repoDir, "e2e", "rugpull-server.mjs")
	f := growFixture(t, []string{"a_echo", "b_grow"}, map[string]map[string]any{
		"a": {"command": "node", "args": []string{server}, "env": map[string]string{"TOOL_PREFIX": "a_"}},
		"b": {"command": "node", "args": []string{server}, "env": map[string]string{"TOOL_PREFIX": "b_", "GROW": "1"}},
	})
	run := runAgent(t, agentOver(t, f, "stdio", []any{
		map[string]any{"name": "a_echo", "arguments": map[string]any{"text": "before"}},
		map[string]any{"name": "b_grow", "arguments": map[string]any{"name": "a_echo"}},
		map[string]any{"waitListChanged": true},
		map[string]any{"list": true},
		map[string]any{"name": "a_echo", "arguments": map[string]any{"text": "after"}},
	}))
	if len(run.WaitErrors) > 0 {
		t.Fatal(run.WaitErrors)
	}
	if r := run.Results[0]; r.IsError || text(r) != "before" {
		t.Fatalf("a_echo before the collision: %+v", r)
	}
	if want := []string{"b_grow"}; len(run.Lists) != 1 || !slices.Equal(run.Lists[0], want) {
		t.Fatalf("tools/list after the collision: %v, want %v", run.Lists, want)
	}
	r := run.Results[2]
	if !r.IsError || !strings.Contains(text(r), "Denied by policy: tool offered by more than one upstream (a, b) (receipt ") {
		t.Fatalf("a_echo after the collision: %+v", r)
	}
	waitForReceipts(t, f, 3)
	verifyAll(t, f)
	id := regexp.MustCompile(`\(receipt (\S+)\)`).FindStringSubmatch(text(r))[1]
	_, p := readReceipt(t, filepath.Join(f.dir, "receipts", id+".json"))
	if p.Execution.Status != receipt.StatusDenied || !strings.Contains(p.Execution.Reason, "tool a_echo is offered by more than one upstream (a, b)") {
		t.Fatalf("a_echo's denied receipt: %+v", p.Execution)
	}
}

// TestStdioPassThroughDoesNotBlockReading: over the stdio front a passed-through
// request (resources/read) is answered on a worker, as a tools/call is: while the
// upstream holds it, the agent's next request is read and answered. The upstream
// (the official TypeScript SDK) answers the read only once that request, a call of
// release, reached it, so a front that read nothing meanwhile never answers either.
func TestStdioPassThroughDoesNotBlockReading(t *testing.T) {
	nodeModules(t)
	f := keyedFixture(t)
	f.writeGrant(t, "grant.json", []string{"release", "resources"}, time.Now().Add(-time.Minute), 24*time.Hour, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`permit (principal, action, resource);`), 0o644)
	f.writeConfig(map[string]any{
		"identity":  map[string]any{"keyFile": "gateway.key"},
		"upstream":  map[string]any{"command": "node", "args": []string{filepath.Join(repoDir, "e2e", "rugpull-server.mjs")}, "env": map[string]string{"HOLD": "1", "HOLD_LOG": filepath.Join(f.dir, "hold.log")}},
		"grantFile": "grant.json", "trustedPrincipalKeys": []string{"alice.pub"}, "policyFile": "policy.cedar",
		"receiptsDir": "receipts", "logFile": "receipts.log", "passThrough": []string{"resources"},
	})
	cmd, c := startStdioGateway(t, f.config)
	defer func() { c.Close(); _ = cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := make(chan error, 1)
	go func() {
		req := mcp.ReadResourceRequest{}
		req.Params.URI = "test://held"
		res, err := c.ReadResource(ctx, req)
		if err == nil && (len(res.Contents) != 1 || res.Contents[0].(mcp.TextResourceContents).Text != "held until released") {
			err = fmt.Errorf("resources/read: %+v", res.Contents)
		}
		read <- err
	}()
	// release only once the read is with the upstream (which holds it): a front still
	// waiting for the read's answer would not read release's request.
	testkit.Eventually(t, 20*time.Second, func() error {
		if data, _ := os.ReadFile(filepath.Join(f.dir, "hold.log")); string(data) != "read\n" {
			return fmt.Errorf("resources/read not at the upstream yet")
		}
		return nil
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = "release"
	if res, err := c.CallTool(ctx, req); err != nil || res.IsError || resultText(res) != "released" {
		t.Fatalf("release, sent while resources/read is held: %+v, %v", res, err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}
