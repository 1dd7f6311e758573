package tenancy_test

import (
	"errors"
	"testing"

	"svc.dev/svc/internal/tenancy"
)

// TestTenantIDRules (issue 29, point 11): the operator's rule and the stricter
// self-registration rule layered on it. Every id of up to 3 characters over an
// alphabet with letters, digits, '-', '_', capitals and '.': whatever the
// self-registration rule accepts, the operator's accepts too.
func TestTenantIDRules(t *testing.T) {
	for id, want := range map[string][2]bool{ // operator, self-registered
		"a": {true, false}, "a_b": {true, false}, "abc": {true, true}, "a-1": {true, true},
		"---": {false, false}, "-ab": {false, false}, "_ab": {false, false}, "Abc": {false, false},
		"": {false, false}, "0ab": {true, true},
		"abcdefghijklmnopqrstuvwxyz0123456789abcd":                         {true, true},   // 40
		"abcdefghijklmnopqrstuvwxyz0123456789abcde":                        {true, false},  // 41
		"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0":  {true, false},  // 63
		"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01": {false, false}, // 64
	} {
		op, self := tenancy.CheckTenantID(id), tenancy.CheckSelfRegisteredID(id)
		if (op == nil) != want[0] || (self == nil) != want[1] {
			t.Errorf("%q: operator %v, self-registered %v; want %v", id, op, self, want)
		}
		if op != nil && !errors.Is(op, tenancy.ErrInvalid) || self != nil && !errors.Is(self, tenancy.ErrInvalid) {
			t.Errorf("%q: not ErrInvalid: %v, %v", id, op, self)
		}
	}
	const alphabet = "az09-_A."
	var ids []string
	for _, a := range alphabet {
		ids = append(ids, string(a))
		for _, b := range alphabet {
			ids = append(ids, string(a)+string(b))
			for _, c := range alphabet {
				ids = append(ids, string(a)+string(b)+string(c))
			}
		}
	}
	for _, id := range ids {
		if tenancy.CheckSelfRegisteredID(id) == nil && tenancy.CheckTenantID(id) != nil {
			t.Fatalf("%q: self-registration accepts what the tenancy layer refuses", id)
		}
	}
}
