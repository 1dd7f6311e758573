package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"svc.dev/svc/policy"
)

const refundPolicy = `
@id("refund-small")
permit (principal == Agent::"billing-bot", action == Action::"refund", resource == Tool::"refund")
when { context.args.amount <= 100 };

@id("search-anyone")
permit (principal, action == Action::"search", resource);

@id("no-prod")
forbid (principal, action, resource)
when { context has args && context.args has env && context.args.env == "prod" };

@id("grant-scope")
permit (principal, action == Action::"transfer", resource)
when { context has grant && context.grant.scopes.contains("transfer") && context.grant.principal == "alice" };

@id("fact-balance")
permit (principal, action == Action::"pay", resource)
when { context.facts.balance.cents >= context.args.cents };
`

func mustParse(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.cedar", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvaluate(t *testing.T) {
	p := mustParse(t, refundPolicy)
	sum := sha256.Sum256([]byte(refundPolicy))
	digest := hex.EncodeToString(sum[:])
	cases := []struct {
		name     string
		req      policy.Request
		decision string
		reasons  []string
		errSub   string // substring every error must contain; "" means no errors
	}{
		{"integer within cap", policy.Request{Agent: "billing-bot", Tool: "refund", Args: json.RawMessage(`{"amount": 12}`)}, policy.Allow, []string{"refund-small"}, ""},
		{"integer written as float", policy.Request{Agent: "billing-bot", Tool: "refund", Args: json.RawMessage(`{"amount": 1.2e1}`)}, policy.Allow, []string{"refund-small"}, ""},
		{"over cap: default deny", policy.Request{Agent: "billing-bot", Tool: "refund", Args: json.RawMessage(`{"amount": 101}`)}, policy.Deny, []string{}, ""},
		{"float is an evaluation error", policy.Request{Agent: "billing-bot", Tool: "refund", Args: json.RawMessage(`{"amount": 12.5}`)}, policy.Deny, []string{}, "refund-small: "},
		{"huge integer is not a Long", policy.Request{Agent: "billing-bot", Tool: "refund", Args: json.RawMessage(`{"amount": 1e30}`)}, policy.Deny, []string{}, "refund-small: "},
		{"missing arg is an error", policy.Request{Agent: "billing-bot", Tool: "refund", Args: json.RawMessage(`{}`)}, policy.Deny, []string{}, "refund-small: "},
		{"null arg is absent", policy.Request{Agent: "billing-bot", Tool: "refund", Args: json.RawMessage(`{"amount": null}`)}, policy.Deny, []string{}, "refund-small: "},
		{"other agent", policy.Request{Agent: "intruder", Tool: "refund", Args: json.RawMessage(`{"amount": 1}`)}, policy.Deny, []string{}, ""},
		{"permit without conditions", policy.Request{Agent: "x", Tool: "search", Args: json.RawMessage(`{"q": "cats"}`)}, policy.Allow, []string{"search-anyone"}, ""},
		{"forbid wins", policy.Request{Agent: "x", Tool: "search", Args: json.RawMessage(`{"env": "prod"}`)}, policy.Deny, []string{"no-prod"}, ""},
		{"no grant on SDK calls", policy.Request{Agent: "x", Tool: "transfer"}, policy.Deny, []string{}, ""},
		{"grant in context", policy.Request{Agent: "x", Tool: "transfer", Grant: &policy.Grant{Principal: "alice", Scopes: []string{"transfer"}}}, policy.Allow, []string{"grant-scope"}, ""},
		{"facts in context", policy.Request{Agent: "x", Tool: "pay", Args: json.RawMessage(`{"cents": 500}`), Facts: map[string]json.RawMessage{"balance": json.RawMessage(`{"cents": 900}`)}}, policy.Allow, []string{"fact-balance"}, ""},
		{"fact missing is an error", policy.Request{Agent: "x", Tool: "pay", Args: json.RawMessage(`{"cents": 500}`)}, policy.Deny, []string{}, "fact-balance: "},
		{"duplicate key", policy.Request{Agent: "x", Tool: "search", Args: json.RawMessage(`{"q": 1, "q": 2}`)}, policy.Deny, []string{}, `duplicate key "q"`},
		{"not JSON", policy.Request{Agent: "x", Tool: "search", Args: json.RawMessage(`{"q":`)}, policy.Deny, []string{}, "args"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Evaluate(c.req)
			if d.Decision != c.decision {
				t.Errorf("decision %q, want %q (%+v)", d.Decision, c.decision, d)
			}
			if !slices.Equal(d.Reasons, c.reasons) {
				t.Errorf("reasons %q, want %q", d.Reasons, c.reasons)
			}
			if c.errSub == "" && len(d.Errors) != 0 {
				t.Errorf("errors %q, want none", d.Errors)
			}
			if c.errSub != "" {
				if len(d.Errors) == 0 {
					t.Errorf("no errors, want one containing %q", c.errSub)
				}
				for _, e := range d.Errors {
					if !strings.Contains(e, c.errSub) {
						t.Errorf("error %q lacks %q", e, c.errSub)
					}
				}
			}
			if d.PolicyDigest != digest {
				t.Errorf("policyDigest %s, want %s", d.PolicyDigest, digest)
			}
		})
	}
}

// SPEC.md: a float in args that a policy touches is an evaluation error, and an
// evaluation error is a deny with the error recorded.
func TestFloatTouchedDeniesWithError(t *testing.T) {
	p := mustParse(t, `@id("cap") permit (principal, action, resource) when { context.args.amount <= 100 };`)
	d := p.Evaluate(policy.Request{Agent: "a", Tool: "refund", Args: json.RawMessage(`{"amount": 12.5}`)})
	if d.Decision != policy.Deny || len(d.Errors) != 1 {
		t.Fatalf("decision %+v, want deny with one error", d)
	}
	for _, want := range []string{"cap: ", "args.amount=12.5"} {
		if !strings.Contains(d.Errors[0], want) {
			t.Errorf("error %q lacks %q", d.Errors[0], want)
		}
	}
	// Untouched floats are harmless; a policy can also refuse them by name.
	d = p.Evaluate(policy.Request{Agent: "a", Tool: "refund", Args: json.RawMessage(`{"amount": 12, "ratio": 0.5}`)})
	if d.Decision != policy.Allow || len(d.Errors) != 0 {
		t.Fatalf("untouched float: %+v", d)
	}
	q := mustParse(t, `@id("ok") permit (principal, action, resource);
@id("no-fractions") forbid (principal, action, resource) when { context.args.amount is Float };`)
	d = q.Evaluate(policy.Request{Agent: "a", Tool: "refund", Args: json.RawMessage(`{"amount": 0.1}`)})
	if d.Decision != policy.Deny || !slices.Equal(d.Reasons, []string{"no-fractions"}) || len(d.Errors) != 0 {
		t.Fatalf("is Float: %+v", d)
	}
	// Arithmetic, ordering the other way and equality.
	for text, want := range map[string]string{
		`@id("p") permit (principal, action, resource) when { context.args.amount + 1 > 0 };`: policy.Deny,
		`@id("p") permit (principal, action, resource) when { 100 >= context.args.amount };`:  policy.Deny,
		`@id("p") permit (principal, action, resource) when { context.args.amount != 12 };`:   policy.Allow,
	} {
		d := mustParse(t, text).Evaluate(policy.Request{Agent: "a", Tool: "t", Args: json.RawMessage(`{"amount": 12.5}`)})
		if d.Decision != want {
			t.Errorf("%s: %+v, want %s", text, d, want)
		}
		if want == policy.Deny && len(d.Errors) == 0 {
			t.Errorf("%s: deny without an error", text)
		}
	}
}

// A permit that was satisfied does not make an allow when another policy failed to
// evaluate: any evaluation error is a deny.
func TestErrorBeatsPermit(t *testing.T) {
	p := mustParse(t, `@id("open") permit (principal, action, resource);
@id("broken") permit (principal, action, resource) when { context.args.n > 1 };`)
	d := p.Evaluate(policy.Request{Agent: "a", Tool: "t", Args: json.RawMessage(`{"n": "two"}`)})
	if d.Decision != policy.Deny || len(d.Reasons) != 0 || len(d.Errors) != 1 || !strings.HasPrefix(d.Errors[0], "broken: ") {
		t.Fatalf("%+v", d)
	}
	// A forbid that fired stays a reason beside the error.
	p = mustParse(t, `@id("stop") forbid (principal, action, resource);
@id("broken") permit (principal, action, resource) when { context.args.n > 1 };`)
	d = p.Evaluate(policy.Request{Agent: "a", Tool: "t", Args: json.RawMessage(`{"n": "two"}`)})
	if d.Decision != policy.Deny || !slices.Equal(d.Reasons, []string{"stop"}) || len(d.Errors) != 1 {
		t.Fatalf("%+v", d)
	}
}

func TestDecisionJSON(t *testing.T) {
	d := mustParse(t, `permit (principal, action, resource) when { false };`).Evaluate(policy.Request{Agent: "a", Tool: "t"})
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"decision":"deny","reasons":[],"errors":[],"policyDigest":"` + d.PolicyDigest + `"}`
	if string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
}

func TestPolicyIDs(t *testing.T) {
	p := mustParse(t, `@id("named") permit (principal, action == Action::"a", resource);
permit (principal, action == Action::"b", resource);`)
	if got := p.IDs(); !slices.Equal(got, []string{"named", "policy1"}) {
		t.Fatalf("ids %q", got)
	}
	d := p.Evaluate(policy.Request{Agent: "x", Tool: "b"})
	if !slices.Equal(d.Reasons, []string{"policy1"}) {
		t.Fatalf("reasons %q", d.Reasons)
	}
	for name, text := range map[string]string{
		"duplicate id": `@id("x") permit (principal, action, resource); @id("x") forbid (principal, action, resource);`,
		"empty id":     `@id("") permit (principal, action, resource);`,
		"syntax":       `permit (principal, action, resource`,
		"unknown op":   `permit (principal, action, resource) when { context.args.a ~ 1 };`,
	} {
		if _, err := policy.Parse("bad.cedar", []byte(text)); err == nil {
			t.Errorf("%s: parsed", name)
		} else if !strings.Contains(err.Error(), "bad.cedar") {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.cedar")
	if err := os.WriteFile(path, []byte(refundPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(refundPolicy))
	if p.Digest() != hex.EncodeToString(sum[:]) {
		t.Fatal("digest is not the SHA-256 of the file")
	}
	if _, err := policy.Load(filepath.Join(dir, "absent.cedar")); err == nil {
		t.Fatal("loaded a missing file")
	}
}

func TestLongOf(t *testing.T) {
	longs := map[string]int64{
		"0": 0, "-0": 0, "0.0": 0, "0e999999": 0, "12": 12, "12.0": 12, "1.2e1": 12, "1200e-2": 12, "-7": -7,
		"1E2": 100, "1e+2": 100, "9223372036854775807": 9223372036854775807, "-9223372036854775808": -9223372036854775808,
		"922337203685477580.7e1": 9223372036854775807,
	}
	for text, want := range longs {
		if n, ok := policy.LongOf(text); !ok || n != want {
			t.Errorf("LongOf(%s) = %d, %v; want %d", text, n, ok, want)
		}
	}
	for _, text := range []string{"12.5", "0.1", "1e-1", "1e30", "9223372036854775808", "-9223372036854775809", "1e99999999999999999999", "1.0000000000000000001"} {
		if n, ok := policy.LongOf(text); ok {
			t.Errorf("LongOf(%s) = %d, want not a Long", text, n)
		}
	}
}
