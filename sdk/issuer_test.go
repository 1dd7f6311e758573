package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/conformance"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/sdk"
	"svc.dev/svc/signer"
)

const testPolicy = `@id("small-refunds")
permit (principal == Agent::"billing-bot", action == Action::"refund", resource == Tool::"refund")
when { context.args.amount <= 100 };
@id("search")
permit (principal, action == Action::"search", resource);
`

// openLocal opens an issuer from a config with a local log file and the test policy;
// paths in the config are relative, resolved against the config file.
func openLocal(t *testing.T, extra map[string]any) (*sdk.Issuer, *signer.Key, string) {
	t.Helper()
	dir := t.TempDir()
	key, _ := writeKey(t, dir, 3)
	writeFile(t, filepath.Join(dir, "policy.cedar"), testPolicy)
	cfg := map[string]any{
		"identity":    map[string]any{"keyFile": "keys/agent.key"},
		"agentId":     "billing-bot",
		"framework":   "langchain",
		"policyFile":  "policy.cedar",
		"receiptsDir": "receipts",
		"logFile":     "receipts.log",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	path := writeConfig(t, dir, cfg)
	// Load from another working directory: relative paths follow the config file.
	is, err := sdk.OpenFile(context.Background(), path, sdk.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { is.Close(context.Background()) })
	return is, key, dir
}

func TestRecordEveryOutcome(t *testing.T) {
	is, key, dir := openLocal(t, map[string]any{"principalId": "alice@example.com"})
	ctx := context.Background()
	if h := is.Health(); h.AgentID != "billing-bot" || h.KeyID != key.KeyID() || h.Log.Kind != "file" || h.Log.Where != filepath.Join(dir, "receipts.log") {
		t.Fatalf("health %+v", h)
	}
	ev := sdk.ToolEvent{Tool: "refund", Args: json.RawMessage(`{"amount": 40}`), Model: strp("claude-x"),
		Session: &sdk.SessionIDs{ID: strp("s-1"), ToolUseID: strp("tu-9")}}
	allow, err := is.Decide(ev)
	if err != nil || allow == nil || allow.Decision != "allow" {
		t.Fatalf("decide: %+v %v", allow, err)
	}
	over := sdk.ToolEvent{Tool: "refund", Args: json.RawMessage(`{"amount": 12.5}`)}
	deny, err := is.Decide(over)
	if err != nil || deny.Decision != "deny" || len(deny.Errors) != 1 {
		t.Fatalf("decide float: %+v %v", deny, err)
	}
	cases := []struct {
		ev  sdk.ToolEvent
		out sdk.Outcome
		dec *sdk.PolicyDecision
	}{
		{ev, sdk.Executed(map[string]int{"refunded": 40}), allow},
		{ev, sdk.Failed(json.RawMessage(`{"isError":true,"message":"card declined"}`)), allow},
		{over, sdk.Denied("policy: " + strings.Join(deny.Errors, "; ")), deny},
		{ev, sdk.Errored("connection refused"), allow},
		{sdk.ToolEvent{Tool: "search", Args: json.RawMessage(`{}`)}, sdk.Executed(nil), nil},
	}
	for i, c := range cases {
		rc, err := is.Record(ctx, c.ev, c.out, c.dec)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if rc.Path != filepath.Join(dir, "receipts", rc.ID+".json") {
			t.Errorf("path %s", rc.Path)
		}
		data, err := os.ReadFile(rc.Path)
		if err != nil {
			t.Fatal(err)
		}
		rep := conformance.VerifyBytes(data, conformance.Options{IssuerKeys: []signer.PublicKey{key.Public()}})
		if !rep.Verified {
			t.Fatalf("case %d: %s failed: %+v", i, rep.FirstFailure(), rep.Checks)
		}
		var sawClaimed bool
		for _, ch := range rep.Checks {
			sawClaimed = sawClaimed || ch.Name == conformance.CheckPrincipalClaimed && ch.OK
		}
		if !sawClaimed || rep.Issuer == nil || rep.Issuer.Enforced {
			t.Errorf("case %d: want the SDK check and a self-reported issuer: %+v", i, rep)
		}
		p := testkit.Predicate(t, rc.Bundle)
		if p.ReceiptID != rc.ID || rc.Bundle.Inclusion.LeafIndex != uint64(i) {
			t.Errorf("case %d: id %s, leaf %d", i, p.ReceiptID, rc.Bundle.Inclusion.LeafIndex)
		}
		if p.Issuer.Kind != "sdk" || p.Issuer.Framework != "langchain" || p.Issuer.KeyID != key.KeyID() {
			t.Errorf("issuer %+v", p.Issuer)
		}
		if p.Principal.ID == nil || *p.Principal.ID != "alice@example.com" || p.Principal.Provenance != "claimed" || p.Principal.KeyID != "" {
			t.Errorf("principal %+v", p.Principal)
		}
		if p.Agent.ID != "billing-bot" || p.Agent.Provenance != "claimed" || p.Delegation != nil || p.Tool.Provenance != "claimed" || p.Request.Provenance != "claimed" {
			t.Errorf("agent %+v, delegation %v, tool %+v", p.Agent, p.Delegation, p.Tool)
		}
		if p.Execution.Status != c.out.Status || p.Execution.Provenance != "claimed" {
			t.Errorf("execution %+v", p.Execution)
		}
		raw := rawPredicate(t, rc.Bundle)
		if string(raw["facts"]) != "{}" {
			t.Errorf("facts %s, want {}", raw["facts"])
		}
		if c.dec == nil {
			if string(raw["policy"]) != "null" {
				t.Errorf("policy %s, want null", raw["policy"])
			}
		} else if p.Policy == nil || p.Policy.Decision != c.dec.Decision || p.Policy.Provenance != "claimed" || p.Policy.PolicyDigest != is.Policy().Digest() {
			t.Errorf("policy %+v", p.Policy)
		}
	}
	// The session and model of the first receipt; the third has none.
	ents := listDir(t, filepath.Join(dir, "receipts"))
	if len(ents) != len(cases) {
		t.Fatalf("receipts dir holds %v", ents)
	}
}

func TestRecordWithoutPrincipalOrSession(t *testing.T) {
	is, _, _ := openLocal(t, nil)
	rc, err := is.Record(context.Background(), sdk.ToolEvent{Tool: "search", Args: json.RawMessage(`{"q":"x"}`)}, sdk.Executed("ok"), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := rawPredicate(t, rc.Bundle)
	for field, want := range map[string]string{
		"principal": `{"id":null,"provenance":"claimed"}`,
		"session":   `{"id":null,"provenance":"claimed","toolUseId":null}`,
		"model":     `{"id":null,"provenance":"claimed"}`,
		"facts":     `{}`,
		"policy":    `null`,
		"execution": `{"provenance":"claimed","result":"ok","resultDigest":"` + mustDigest(t, `"ok"`) + `","status":"executed"}`,
	} {
		if string(raw[field]) != want {
			t.Errorf("%s = %s, want %s", field, raw[field], want)
		}
	}
	if _, ok := raw["delegation"]; ok {
		t.Error("an SDK receipt carries a delegation")
	}
}

// TestRecordClaimedDefinitionDigest: a caller-supplied definition digest is the
// receipt's tool.definitionDigest, claimed like the rest of its tool.
func TestRecordClaimedDefinitionDigest(t *testing.T) {
	is, _, _ := openLocal(t, nil)
	d := mustDigest(t, `{"description":"Searches.","name":"search"}`)
	rc, err := is.Record(context.Background(), sdk.ToolEvent{Tool: "search", Args: json.RawMessage(`{}`), DefinitionDigest: d}, sdk.Executed("ok"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(rawPredicate(t, rc.Bundle)["tool"]), `{"definitionDigest":"`+d+`","name":"search","provenance":"claimed"}`; got != want {
		t.Fatalf("tool = %s, want %s", got, want)
	}
}

func mustDigest(t *testing.T, j string) string {
	d, err := receipt.DigestJSON([]byte(j))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRecordRefusesMalformedInput(t *testing.T) {
	is, _, dir := openLocal(t, nil)
	ok := sdk.ToolEvent{Tool: "search", Args: json.RawMessage(`{}`)}
	dec := &sdk.PolicyDecision{Decision: "allow", Reasons: []string{}, Errors: []string{}, PolicyDigest: strings.Repeat("a", 64)}
	cases := []struct {
		name string
		ev   sdk.ToolEvent
		out  sdk.Outcome
		dec  *sdk.PolicyDecision
		want string
	}{
		{"no tool", sdk.ToolEvent{Args: json.RawMessage(`{}`)}, sdk.Executed(1), nil, "event.tool is required"},
		{"no args", sdk.ToolEvent{Tool: "t"}, sdk.Executed(1), nil, "event.args is required"},
		{"args array", sdk.ToolEvent{Tool: "t", Args: json.RawMessage(`[1]`)}, sdk.Executed(1), nil, "event.args must be a JSON object"},
		{"duplicate key", sdk.ToolEvent{Tool: "t", Args: json.RawMessage(`{"a":1,"a":2}`)}, sdk.Executed(1), nil, "event.args"},
		{"huge number", sdk.ToolEvent{Tool: "t", Args: json.RawMessage(`{"a":1e400}`)}, sdk.Executed(1), nil, "event.args"},
		{"control char tool", sdk.ToolEvent{Tool: "a\nb", Args: json.RawMessage(`{}`)}, sdk.Executed(1), nil, "control character"},
		{"bad definition digest", sdk.ToolEvent{Tool: "t", Args: json.RawMessage(`{}`), DefinitionDigest: strings.Repeat("A", 64)}, sdk.Executed(1), nil, "event.definitionDigest"},
		{"no status", ok, sdk.Outcome{}, nil, "outcome.status is required"},
		{"withheld", ok, sdk.Outcome{Status: "withheld", Reason: "x"}, nil, "withheld is a gateway state"},
		{"unknown status", ok, sdk.Outcome{Status: "done"}, nil, `outcome.status "done"`},
		{"executed without result", ok, sdk.Outcome{Status: "executed"}, nil, "outcome.result is required"},
		{"denied without reason", ok, sdk.Outcome{Status: "denied"}, nil, "outcome.reason is required"},
		{"error without error", ok, sdk.Outcome{Status: "error"}, nil, "outcome.error is required"},
		{"denied with result", ok, sdk.Outcome{Status: "denied", Reason: "no", Result: json.RawMessage(`1`)}, nil, "takes reason only"},
		{"unencodable result", ok, sdk.Executed(func() {}), nil, "outcome.result"},
		{"bad decision", ok, sdk.Executed(1), &sdk.PolicyDecision{Decision: "maybe", PolicyDigest: dec.PolicyDigest}, "policy.decision"},
		{"bad digest", ok, sdk.Executed(1), &sdk.PolicyDecision{Decision: "allow", PolicyDigest: "abc"}, "policy.policyDigest"},
	}
	for _, c := range cases {
		_, err := is.Record(context.Background(), c.ev, c.out, c.dec)
		var ie *sdk.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want an InputError containing %q", c.name, err, c.want)
		}
	}
	if ents := listDir(t, filepath.Join(dir, "receipts")); len(ents) != 0 {
		t.Fatalf("receipts written for refused input: %v", ents)
	}
	if _, err := is.Record(context.Background(), ok, sdk.Executed(1), dec); err != nil {
		t.Fatalf("a well-formed claimed decision: %v", err)
	}
}

// A log that refuses the leaf (here an HTTP log answering 401) yields a LogError
// naming the log, and no receipt file.
func TestLogRefusalWritesNothing(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"unauthorized"}`))
	}))
	defer ts.Close()
	dir := t.TempDir()
	writeKey(t, dir, 4)
	path := writeConfig(t, dir, map[string]any{
		"identity": map[string]any{"keyFile": "keys/agent.key"}, "agentId": "a", "framework": "f", "receiptsDir": "receipts",
		"log": map[string]any{"url": ts.URL + "/t/acme/append", "tokenEnv": "SDK_TEST_TOKEN"},
	})
	getenv := func(k string) (string, bool) {
		return map[string]string{"SDK_TEST_TOKEN": "wrong"}[k], k == "SDK_TEST_TOKEN"
	}
	is, err := sdk.OpenFile(context.Background(), path, sdk.OpenOptions{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close(context.Background())
	if h := is.Health(); h.Log.Kind != "http" || h.Log.Where != ts.URL+"/t/acme/append" {
		t.Fatalf("health %+v", h)
	}
	_, err = is.Record(context.Background(), sdk.ToolEvent{Tool: "t", Args: json.RawMessage(`{}`)}, sdk.Executed(1), nil)
	var le *sdk.LogError
	if !errors.As(err, &le) || !errors.Is(err, receipt.ErrLogRefused) {
		t.Fatalf("error %v, want a LogError wrapping ErrLogRefused", err)
	}
	for _, want := range []string{ts.URL + "/t/acme/append", "401", "unauthorized", "no receipt was written"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if ents := listDir(t, filepath.Join(dir, "receipts")); len(ents) != 0 {
		t.Fatalf("receipts written: %v", ents)
	}
}
