package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/receipt"
)

// fastPathFixture is server-everything behind the gateway with an allow-all policy
// and a grant for the tools the fast-path tests call (not get-env).
func fastPathFixture(t *testing.T) *fixture {
	f := newFixture(t, func(cfg map[string]any) {
		cfg["policyFile"] = "allow.cedar"
		delete(cfg, "facts")
		delete(cfg, "precommit")
	})
	os.WriteFile(filepath.Join(f.dir, "allow.cedar"), []byte(`@id("all") permit (principal, action, resource);`+"\n"), 0o644)
	f.writeGrant(t, "grant.json", []string{"echo", "get-sum", "trigger-long-running-operation", "no-such-tool"}, time.Now().Add(-time.Minute), 24*time.Hour, nil)
	return f
}

// TestGatewayFastPathWithTSClient: the official TypeScript client over stdio, with
// calls in flight together over one session, one cancelled while the others run,
// pings and tools/list interleaved, lines far over the read buffers, and the errors.
// Every answer reaches its own call, and every receipt written verifies.
func TestGatewayFastPathWithTSClient(t *testing.T) {
	f := fastPathFixture(t)
	var out fastRun
	runNode(t, &out, "gateway-fastpath.mjs", svcBin, f.config)
	out.check(t)
	// 24 echoes, the one after, the 200 kB one, the denial, the refused arguments; the
	// cancelled call's receipt (status error) too when the log took it in time.
	reports := verifyAll(t, f)
	if len(reports) < 28 {
		t.Fatalf("%d receipts, want at least 28", len(reports))
	}
	for id, rep := range reports {
		if !strings.Contains(rep, "RESULT: VERIFIED") {
			t.Fatalf("receipt %s:\n%s", id, rep)
		}
	}
	checkCancelledReceipt(t, f)
	b, err := receipt.ReadBundle(filepath.Join(f.dir, "receipts", out.Big.Receipt+".json"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := receipt.DecodeStatement(b.Envelope)
	p, _ := st.DecodePredicate()
	if p.Execution.Status != receipt.StatusExecuted || len(p.Execution.Result) < 200_000 {
		t.Fatalf("the big call's receipt: status %s, result %d bytes", p.Execution.Status, len(p.Execution.Result))
	}
}

// fastStep is what the fast-path scripts (e2e/gateway-fastpath.mjs,
// e2e/gateway-http-fastpath.mjs) report of one call.
type fastStep struct {
	Text    string `json:"text"`
	Receipt string `json:"receipt"`
	IsError bool   `json:"isError"`
	Thrown  string `json:"thrown"`
	Length  int    `json:"length"`
}

// fastRun is what both fast-path scripts report of the steps they share.
type fastRun struct {
	Echoes    []fastStep
	Pings     []bool
	Listed    []string
	Cancelled struct {
		Thrown    string `json:"thrown"`
		Completed bool   `json:"completed"`
	}
	After, Big, Huge, Denied, BadArgs fastStep
	Unknown                           struct {
		Thrown string `json:"thrown"`
		Code   int    `json:"code"`
	}
}

// runNode runs a script of e2e/ with node and decodes the JSON object it prints.
func runNode(t *testing.T, out any, script string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(repoDir, "e2e", script)}, args...)...)
	cmd.Dir = filepath.Join(repoDir, "e2e")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s\n%s", script, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("%s output: %v\n%s\n%s", script, err, stdout.String(), stderr.String())
	}
}

// check: 24 calls in flight together each got its own answer and receipt; pings and
// tools/list between them succeeded; the cancelled call was given up and the session
// went on; a 200 kB call came back whole; the 1.5 MB one's receipt was over the log
// file's line limit (the agent is told the action happened without a receipt, as
// before the fast path); a tool nobody offers is mcp-go's JSON-RPC error, one
// outside the grant a denial, arguments the upstream refuses its tool error with a
// receipt.
func (out *fastRun) check(t *testing.T) {
	t.Helper()
	receipts := map[string]bool{}
	for i, e := range out.Echoes {
		if e.Thrown != "" || e.IsError || e.Text != fmt.Sprintf("Echo: call %d", i) || e.Receipt == "" || receipts[e.Receipt] {
			t.Fatalf("echo %d of 24 in flight together: %+v", i, e)
		}
		receipts[e.Receipt] = true
	}
	if len(out.Echoes) != 24 || len(out.Pings) != 4 || strings.Join(out.Listed, ",") != "echo,get-sum,trigger-long-running-operation" {
		t.Fatalf("%d echoes, pings %v, tools listed %v", len(out.Echoes), out.Pings, out.Listed)
	}
	for i, ok := range out.Pings {
		if !ok {
			t.Fatalf("ping %d interleaved with the calls failed", i)
		}
	}
	if out.Cancelled.Completed || out.Cancelled.Thrown == "" {
		t.Fatalf("the cancelled call: %+v", out.Cancelled)
	}
	if out.After.Text != "Echo: after the cancellation" || out.After.Receipt == "" {
		t.Fatalf("a call after the cancellation: %+v", out.After)
	}
	if out.Big.Thrown != "" || out.Big.Length != len("Echo: ")+200_000 || out.Big.Receipt == "" {
		t.Fatalf("the 200 kB call: thrown %q, %d characters: %s", out.Big.Thrown, out.Big.Length, out.Big.Text)
	}
	if !out.Huge.IsError || !strings.HasPrefix(out.Huge.Text, "The upstream action has already happened, but the log did not take its receipt") {
		t.Fatalf("the 1.5 MB call: %+v", out.Huge)
	}
	if out.Unknown.Code != -32602 || !strings.Contains(out.Unknown.Thrown, "no-such-tool") {
		t.Fatalf("a tool nobody offers: %+v", out.Unknown)
	}
	if !out.Denied.IsError || !strings.HasPrefix(out.Denied.Text, "Denied by policy: outside delegated scope (receipt ") {
		t.Fatalf("a tool outside the grant: %+v", out.Denied)
	}
	if out.BadArgs.Thrown != "" || !out.BadArgs.IsError || out.BadArgs.Receipt == "" {
		t.Fatalf("arguments the upstream refuses: %+v", out.BadArgs)
	}
}

// checkCancelledReceipt: the cancellation reached the call path: the upstream call
// was given up, and its receipt says so (it does not wait out the operation's 20 s).
// It returns the receipt's leaf index.
func checkCancelledReceipt(t *testing.T, f *fixture) uint64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(f.dir, "receipts", "*.json"))
	var long []string
	var leaf uint64
	for _, file := range files {
		b, err := receipt.ReadBundle(file)
		if err != nil {
			continue
		}
		st, _ := receipt.DecodeStatement(b.Envelope)
		if p, err := st.DecodePredicate(); err == nil && p.Tool.Name == "trigger-long-running-operation" {
			long = append(long, p.Execution.Status+": "+p.Execution.Error)
			leaf = b.Inclusion.LeafIndex
		}
	}
	if len(long) != 1 || !strings.HasPrefix(long[0], receipt.StatusError+": ") || !strings.Contains(long[0], "context canceled") {
		t.Fatalf("the cancelled call's receipts: %q", long)
	}
	return leaf
}

// TestGatewayFastPathLeavesTheRestToMCPGo: lines the fast path declines (ids mcp-go
// would echo otherwise, a batch, a task-augmented call, a stateless-era request, bad
// JSON) are answered by mcp-go as before, each with the id mcp-go gives it, and the
// plain calls around them by the fast path, with the upstream's content as sent.
func TestGatewayFastPathLeavesTheRestToMCPGo(t *testing.T) {
	f := fastPathFixture(t)
	cmd := exec.Command(svcBin, "gateway", "--config", f.config)
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := []string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"plain"},"_meta":{"progressToken":7}}}`,
		`{"jsonrpc":"2.0","id":"s-2","method":"tools/call","params":{"name":"echo","arguments":{"message":"string id"}}}`,
		`{"jsonrpc":"2.0","id":3e0,"method":"tools/call","params":{"name":"echo","arguments":{"message":"exponent id"}}}`,
		`{"jsonrpc":"2.0","id":"a<b","method":"tools/call","params":{"name":"echo","arguments":{"message":"escaped id"}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"message":"task"},"task":{"ttl":60000}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"nobody-offers-this","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x"}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"message":"last"}}}`,
	}
	for _, l := range lines {
		io.WriteString(stdin, l+"\n")
	}
	answers := map[string]map[string]json.RawMessage{}
	sc := bufio.NewScanner(stdoutPipe)
	sc.Buffer(nil, 8<<20)
	deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for len(answers) < 9 && sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a line that is not JSON on stdout: %q", sc.Text())
		}
		answers[string(m["id"])] = m
	}
	stdin.Close()
	if len(answers) < 9 {
		t.Fatalf("%d answers: %v\n%s", len(answers), answers, stderr.String())
	}
	text := func(id string) string {
		var r struct {
			Content []struct{ Text string } `json:"content"`
			Meta    map[string]any          `json:"_meta"`
		}
		json.Unmarshal(answers[id]["result"], &r)
		if len(r.Content) == 0 || r.Meta["svc/receipt"] == nil {
			return fmt.Sprintf("no content or receipt: %s", answers[id]["result"])
		}
		return r.Content[0].Text
	}
	for id, want := range map[string]string{`1`: "Echo: plain", `"s-2"`: "Echo: string id", `3`: "Echo: exponent id",
		`"a\u003cb"`: "Echo: escaped id", `8`: "Echo: last"} {
		if got := text(id); got != want {
			t.Errorf("answer %s: %q, want %q", id, got, want)
		}
	}
	// mcp-go runs a task-augmented call to a tool without task support as a plain one.
	if got := text(`5`); got != "Echo: task" {
		t.Errorf("answer 5: %q", got)
	}
	for _, id := range []string{`6`, `null`} { // the unknown tool, the bad line: protocol errors
		if answers[id]["error"] == nil {
			t.Errorf("answer %s: %s, want a JSON-RPC error", id, answers[id]["result"])
		}
	}
}
