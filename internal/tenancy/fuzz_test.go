package tenancy

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeEvent: any bytes decode to a checked event or an error, never a panic;
// an accepted event has a valid tenant id, a 64-hex token hash or none, a known plan
// or none, and survives a round trip.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"id":"a","at":"2026-11-22T01:02:03.456Z","actor":"bearer","action":"tenant.add","tenantId":"acme","detail":"","plan":"free"}`))
	f.Add([]byte(`{"action":"token.add","tenantId":"acme","tokenHash":"` + "ab" + `"}`))
	f.Add([]byte(`{"tenantId":"Bad"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEvent(data)
		if err != nil {
			return
		}
		if e.TokenHash != "" {
			if _, ok := parseHash(e.TokenHash); !ok {
				t.Fatalf("accepted token hash %q", e.TokenHash)
			}
		}
		if e.Plan != "" && !ValidPlan(e.Plan) {
			t.Fatalf("accepted plan %q", e.Plan)
		}
		again, _ := json.Marshal(e)
		e2, err := DecodeEvent(again)
		if err != nil || e2 != e {
			t.Fatalf("round trip: %+v -> %+v, %v", e, e2, err)
		}
	})
}
