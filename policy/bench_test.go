package policy_test

import (
	"encoding/json"
	"testing"

	"svc.dev/svc/policy"
)

// BenchmarkEvaluate times one decision of the allow-all policy the gateway benchmark
// uses, for a call with one string argument and a grant of two scopes: what a
// gateway pays per call for Cedar.
//
//	go test -run '^$' -bench Evaluate -benchmem ./policy/
func BenchmarkEvaluate(b *testing.B) {
	p, err := policy.Parse("policy", []byte(`@id("all") permit (principal, action, resource);`))
	if err != nil {
		b.Fatal(err)
	}
	req := policy.Request{Agent: "bench-agent", Tool: "read_text_file", Args: json.RawMessage(`{"path":"/tmp/svc-bench/data/hello.txt"}`),
		Grant: &policy.Grant{Principal: "alice", Scopes: []string{"read_text_file", "list_allowed_directories"}}}
	for b.Loop() {
		if d := p.Evaluate(req); d.Decision != policy.Allow {
			b.Fatalf("decision %+v", d)
		}
	}
}
