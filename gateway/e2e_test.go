package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"

	"svc.dev/svc/internal/svcbin"
	"svc.dev/svc/internal/testkit"

	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

var (
	svcBin  string
	repoDir string
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoDir = filepath.Dir(filepath.Dir(file))
	svcbin.Main(m, &svcBin)
}

// nodeModules is e2e/node_modules, installed by go tool task setup (npm ci). A missing install
// fails the test: it never skips.
func nodeModules(t testing.TB) string {
	t.Helper()
	nm := filepath.Join(repoDir, "e2e", "node_modules")
	if _, err := os.Stat(filepath.Join(nm, "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed: run `go tool task setup` (or npm ci --prefix e2e): %v", err)
	}
	return nm
}

type fixture struct {
	dir, config string
	alice       *signer.Key
	gw          *signer.Key
}

const e2ePolicy = `
@id("echo-anything")
permit (principal, action == Action::"echo", resource);
@id("sums-up-to-50-00")
permit (principal, action == Action::"get-sum", resource)
when { context.args.a + context.args.b <= 5000 && context.facts has weather && context.facts.weather.temperature > 0 };
@id("weather-for-alice")
permit (principal, action == Action::"get-structured-content", resource) when { context.grant.principal == "alice" };
@id("no-chicago")
forbid (principal, action == Action::"get-structured-content", resource) when { context.args.location == "Chicago" };
`

// newFixture writes keys, a grant and a gateway config in front of server-everything.
func newFixture(t testing.TB, mutate func(map[string]any)) *fixture {
	t.Helper()
	nm := nodeModules(t)
	f := keyedFixture(t)
	f.writeGrant(t, "grant.json", []string{"echo", "get-sum", "get-structured-content"}, time.Now().Add(-time.Minute), 24*time.Hour, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(e2ePolicy), 0o644)
	cfg := map[string]any{
		"identity":             map[string]any{"keyFile": "gateway.key"},
		"upstream":             map[string]any{"command": "node", "args": []string{filepath.Join(nm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
		"grantFile":            "grant.json",
		"trustedPrincipalKeys": []string{"alice.pub"},
		"policyFile":           "policy.cedar",
		"facts":                []any{map[string]any{"name": "weather", "tool": "get-structured-content", "args": map[string]any{"location": "New York"}, "forTools": []string{"get-sum"}}},
		"precommit":            []string{"get-sum"},
		"receiptsDir":          "receipts",
		"logFile":              "receipts.log",
	}
	if mutate != nil {
		mutate(cfg)
	}
	f.writeConfig(cfg)
	return f
}

// keyedFixture makes a fixture's directory with alice's and the gateway's key files in
// it, and no config yet.
func keyedFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	f.alice, _ = signer.GenerateKey()
	f.gw, _ = signer.GenerateKey()
	for name, k := range map[string]*signer.Key{"alice": f.alice, "gateway": f.gw} {
		if _, _, err := k.WriteKeyFiles(f.dir, name); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// writeConfig writes cfg as the fixture's gateway.json.
func (f *fixture) writeConfig(cfg map[string]any) {
	data, _ := json.MarshalIndent(cfg, "", "  ")
	f.config = filepath.Join(f.dir, "gateway.json")
	os.WriteFile(f.config, data, 0o644)
}

// startStdioGateway runs `svc gateway --config config` as an agent does (its stdio the
// MCP transport, its stderr the test's) and returns the process and an initialized
// mcp-go client over it. The caller stops it: c.Close (stdin closed) or a kill.
func startStdioGateway(t testing.TB, config string, flags ...string) (*exec.Cmd, *client.Client) {
	t.Helper()
	cmd, stdin, stdout := startGatewayProcess(t, config, os.Stderr, flags...)
	return cmd, startMCPClient(t, client.NewClient(transport.NewIO(stdout, stdin, nil)))
}

// startGatewayProcess starts `svc gateway --config config` with its stderr to stderr
// and returns the process and its stdin and stdout, for a client the caller makes.
// The caller stops it.
func startGatewayProcess(t testing.TB, config string, stderr io.Writer, flags ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(svcBin, append([]string{"gateway", "--config", config}, flags...)...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout
}

func (f *fixture) writeGrant(t testing.TB, name string, scopes []string, from time.Time, ttl time.Duration, parent *receipt.Envelope) *receipt.Envelope {
	t.Helper()
	env, err := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "e2e-agent", scopes, from, ttl, nil, parent), f.alice)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(env)
	os.WriteFile(filepath.Join(f.dir, name), data, 0o644)
	return env
}

type callResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
	Meta              map[string]any  `json:"_meta"`
	Thrown            string          `json:"thrown"`
}

type agentRun struct {
	Tools        []string     `json:"tools"`
	Results      []callResult `json:"results"`
	ConnectError string       `json:"connectError"`
	Lists        [][]string   `json:"lists"`       // tools/list again ({"list": true})
	ListChanged  int          `json:"listChanged"` // notifications/tools/list_changed received
	WaitErrors   []string     `json:"waitErrors"`  // {"waitListChanged": true} that timed out
}

// runAgent drives the gateway with the official TypeScript SDK client.
func runAgent(t *testing.T, scenario map[string]any) agentRun {
	t.Helper()
	sc := filepath.Join(t.TempDir(), "scenario.json")
	data, _ := json.Marshal(scenario)
	os.WriteFile(sc, data, 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(repoDir, "e2e", "gateway-client.mjs"), sc)
	cmd.Dir = filepath.Join(repoDir, "e2e")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var out agentRun
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	return out
}

func text(r callResult) string {
	var s []string
	for _, c := range r.Content {
		s = append(s, c.Text)
	}
	return strings.Join(s, "\n")
}

func receiptID(t *testing.T, r callResult) string {
	t.Helper()
	id, _ := r.Meta["svc/receipt"].(string)
	if id == "" {
		t.Fatalf("result has no _meta svc/receipt: %+v", r)
	}
	return id
}

// waitForReceipts polls, with a deadline, until n receipt files are in the receipts
// directory: with a local log a running gateway writes them a moment after each call.
func waitForReceipts(t *testing.T, f *fixture, n int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		files := receiptFiles(f)
		if len(files) < n {
			return fmt.Errorf("%d receipt files, want %d", len(files), n)
		}
		return nil
	})
}

// receiptFiles lists the receipt files in the receipts directory, leaving out the
// authorization and tool-definitions statements written beside them.
func receiptFiles(f *fixture) []string {
	files, _ := filepath.Glob(filepath.Join(f.dir, "receipts", "*.json"))
	return slices.DeleteFunc(files, func(s string) bool {
		return strings.HasSuffix(s, ".authorization.json") || strings.HasSuffix(s, ".tools.json")
	})
}

// readReceipt reads a receipt file and decodes its predicate; either failing fails the test.
func readReceipt(t *testing.T, file string) (*receipt.Bundle, *receipt.Predicate) {
	t.Helper()
	b, err := receipt.ReadBundle(file)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := receipt.DecodeStatement(b.Envelope)
	p, err := st.DecodePredicate()
	if err != nil {
		t.Fatal(err)
	}
	return b, p
}

// verifyAll runs `svc verify` on every receipt written and returns the reports by id.
func verifyAll(t *testing.T, f *fixture) map[string]string {
	t.Helper()
	files := receiptFiles(f)
	out := map[string]string{}
	for _, b := range files {
		cmd := exec.Command(svcBin, "verify", b, "--issuer-key", filepath.Join(f.dir, "gateway.pub"),
			"--principal-key", filepath.Join(f.dir, "alice.pub"), "--log", filepath.Join(f.dir, "receipts.log"))
		res, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("svc verify %s: %v\n%s", filepath.Base(b), err, res)
		}
		out[strings.TrimSuffix(filepath.Base(b), ".json")] = string(res)
	}
	return out
}

func TestGatewayStdioWithServerEverything(t *testing.T) {
	f := newFixture(t, nil)
	testWithServerEverything(t, f, map[string]any{"transport": "stdio", "command": svcBin, "args": []string{"gateway", "--config", f.config}})
}

// TestGatewayHTTPWithServerEverything: the same calls over Streamable HTTP, where
// plain tools/call requests take the HTTP front's fast path: pre-commit, facts, the
// policy's denials and a forged svc/receipt in the agent's _meta as over stdio.
func TestGatewayHTTPWithServerEverything(t *testing.T) {
	f := newFixture(t, nil)
	addr := testkit.StartProcess(t, exec.Command(svcBin, "gateway", "--config", f.config, "--http", "--port", "0"), regexp.MustCompile(`msg="gateway listening" addr=(\S+)`))
	grant, err := os.ReadFile(filepath.Join(f.dir, "grant.json"))
	if err != nil {
		t.Fatal(err)
	}
	testWithServerEverything(t, f, map[string]any{"transport": "http", "url": "http://" + addr + "/mcp", "grant": base64.RawURLEncoding.EncodeToString(grant)})
}

// testWithServerEverything drives the gateway over the scenario's transport (the
// calls added here) and checks what the agent sees and every receipt.
func testWithServerEverything(t *testing.T, f *fixture, scenario map[string]any) {
	scenario["calls"] = []any{
		map[string]any{"name": "echo", "arguments": map[string]any{"message": "hello through the gateway"}, "_meta": map[string]any{"svc/model": "example-model-1", "svc/receipt": "forged-by-agent"}},
		map[string]any{"name": "get-sum", "arguments": map[string]any{"a": 1200, "b": 800}},
		map[string]any{"name": "get-sum", "arguments": map[string]any{"a": 4000, "b": 2000}},
		map[string]any{"name": "get-sum", "arguments": map[string]any{"a": 12.5, "b": 1}},
		map[string]any{"name": "get-structured-content", "arguments": map[string]any{"location": "Chicago"}},
		map[string]any{"name": "get-env", "arguments": map[string]any{}},
	}
	run := runAgent(t, scenario)
	if want := []string{"echo", "get-structured-content", "get-sum"}; !slices.Equal(run.Tools, want) {
		t.Fatalf("the agent sees tools %v, want only the granted %v", run.Tools, want)
	}
	r := run.Results
	if len(r) != 6 {
		t.Fatalf("%d results: %+v", len(r), r)
	}
	// Allowed: the upstream's content unchanged, plus the receipt id.
	if r[0].IsError || text(r[0]) != "Echo: hello through the gateway" {
		t.Fatalf("echo: %+v", r[0])
	}
	echoID := receiptID(t, r[0])
	if echoID == "forged-by-agent" {
		t.Fatal("the agent's svc/receipt reached the result")
	}
	if r[1].IsError || !strings.Contains(text(r[1]), "2000") {
		t.Fatalf("allowed get-sum: %+v", r[1])
	}
	sumID := receiptID(t, r[1])
	// Denials are tool errors with SPEC's text.
	for i, want := range map[int]string{2: "Denied by policy: no policy permits this call (receipt ", 3: "Denied by policy: no policy permits this call (receipt ",
		4: "Denied by policy: no-chicago (receipt ", 5: "Denied by policy: outside delegated scope (receipt "} {
		if !r[i].IsError || !strings.HasPrefix(text(r[i]), want) || !strings.HasSuffix(text(r[i]), ")") {
			t.Fatalf("call %d: want a tool error starting %q, got %+v", i, want, r[i])
		}
	}
	waitForReceipts(t, f, 6)
	reports := verifyAll(t, f)
	if len(reports) != 6 {
		t.Fatalf("%d receipts written, want 6", len(reports))
	}
	for id, rep := range reports {
		if !strings.Contains(rep, "RESULT: VERIFIED") || !strings.Contains(rep, "ISSUER: gateway") {
			t.Fatalf("receipt %s:\n%s", id, rep)
		}
	}
	if !strings.Contains(reports[sumID], "PASS authorization logged before execution") {
		t.Fatalf("the pre-committed call's receipt lacks its authorization:\n%s", reports[sumID])
	}
	// The echo receipt records the claimed model and the observed tool.
	b, err := receipt.ReadBundle(filepath.Join(f.dir, "receipts", echoID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := receipt.DecodeStatement(b.Envelope)
	p, _ := st.DecodePredicate()
	if p.Model.ID == nil || *p.Model.ID != "example-model-1" || p.Tool.Provenance != receipt.Observed || p.Execution.Status != receipt.StatusExecuted {
		t.Fatalf("echo predicate: %+v", p)
	}
	// The float was an evaluation error, recorded.
	var floatDenied bool
	files, _ := filepath.Glob(filepath.Join(f.dir, "receipts", "*.json"))
	for _, file := range files {
		bb, err := receipt.ReadBundle(file)
		if err != nil {
			continue
		}
		st, _ := receipt.DecodeStatement(bb.Envelope)
		if pp, err := st.DecodePredicate(); err == nil && pp.Policy != nil && len(pp.Policy.Errors) > 0 && pp.Execution.Status == receipt.StatusDenied {
			floatDenied = true
		}
	}
	if !floatDenied {
		t.Fatal("no receipt records the float in args as an evaluation error")
	}
	// A receipt whose policy was bypassed (denied, then re-signed as executed) fails.
	bypassed := bypass(t, f, r[4])
	rep := conformance.VerifyBytes(bypassed, conformance.Options{IssuerKeys: []signer.PublicKey{f.gw.Public()}, PrincipalKeys: []signer.PublicKey{f.alice.Public()}})
	if rep.Verified || rep.FirstFailure() != conformance.CheckPolicyConsistent {
		t.Fatalf("a bypassed policy verified or failed elsewhere: %s", rep.FirstFailure())
	}
}

// bypass rewrites a denied call's receipt as executed and re-signs it with the
// gateway key: what a gateway that ignored its policy would produce.
func bypass(t *testing.T, f *fixture, denied callResult) []byte {
	t.Helper()
	id := strings.TrimSuffix(strings.TrimPrefix(text(denied)[strings.LastIndex(text(denied), "(receipt ")+len("(receipt "):], ""), ")")
	b, err := receipt.ReadBundle(filepath.Join(f.dir, "receipts", id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := receipt.DecodeStatement(b.Envelope)
	p, _ := st.DecodePredicate()
	p.Execution = receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{"content":[{"type":"text","text":"done anyway"}]}`), Provenance: receipt.Observed}
	st2, _ := receipt.NewStatement(p.Tool.Name, p.ReceiptID, p.Request.ArgsDigest, receipt.PredicateReceipt, p)
	env, _ := receipt.SignJSON(receipt.PayloadInToto, st2, f.gw)
	l, err := receipt.OpenFileLog(filepath.Join(t.TempDir(), "l.log"), f.gw, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	proof, err := l.Append(context.Background(), env.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(receipt.Bundle{Envelope: env, TreeHead: proof.TreeHead, Inclusion: proof.Inclusion})
	return data
}
