package policy_test

import (
	"encoding/json"
	"testing"

	"svc.dev/svc/policy"
)

// FuzzEvaluate feeds arbitrary argument text (outside input: the agent's arguments)
// to a policy that touches it. Evaluation never panics and never allows with errors.
func FuzzEvaluate(f *testing.F) {
	p, err := policy.Parse("fuzz.cedar", []byte(`@id("cap") permit (principal, action, resource) when { context.args.amount <= 100 && context.args.tags.contains("ok") };
@id("stop") forbid (principal, action, resource) when { context.args has env && context.args.env == "prod" };`))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{`{"amount": 12, "tags": ["ok"]}`, `{"amount": 12.5}`, `{"amount": 1e400}`, `{"a":{"b":[null,1,"x"]}}`, `{"q":1,"q":2}`, `[1,2]`, `null`, `"x"`, `{`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		d := p.Evaluate(policy.Request{Agent: "a", Tool: "t", Args: json.RawMessage(args)})
		if d.Decision == policy.Allow && len(d.Errors) > 0 {
			t.Fatalf("allow with errors: %+v", d)
		}
		if d.Decision != policy.Allow && d.Decision != policy.Deny {
			t.Fatalf("decision %q", d.Decision)
		}
		if d.Reasons == nil || d.Errors == nil {
			t.Fatal("nil reasons or errors")
		}
	})
}

// FuzzParse feeds arbitrary policy text; a parse either fails or yields unique ids.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`@id("a") permit (principal, action, resource);`))
	f.Add([]byte(`forbid (principal, action, resource) when { context.args.x is Float };`))
	f.Fuzz(func(t *testing.T, text []byte) {
		p, err := policy.Parse("fuzz.cedar", text)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, id := range p.IDs() {
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
		}
		_ = p.Evaluate(policy.Request{Agent: "a", Tool: "t"})
	})
}
