package client

import (
	"strings"
	"testing"
)

// TestCheckLogIDRefusesKeptPrefixes: an operator's log id may not take a shape the
// signer uses for its own state, nor the default ids' prefix, nor control characters.
func TestCheckLogIDRefusesKeptPrefixes(t *testing.T) {
	for _, id := range []string{"tenant:acme", "c2sp-checkpoint:log.example.com/acme", "svc-log/acme", "a\nb", strings.Repeat("x", MaxLogIDLen+1)} {
		if err := CheckLogID(id); err == nil {
			t.Errorf("CheckLogID(%q) accepted it", id)
		}
	}
	for _, id := range []string{"log.example.com/acme", "acme-tenant:1", ""} {
		if err := CheckLogID(id); err != nil {
			t.Errorf("CheckLogID(%q): %v", id, err)
		}
	}
}
