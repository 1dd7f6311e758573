package portal

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"svc.dev/svc/internal/tenancy"
)

// FuzzRegisterBody: the register decoder and validation never panic, and what they
// accept is within SPEC's bounds.
func FuzzRegisterBody(f *testing.F) {
	f.Add([]byte(`{"email":"ada@example.com","password":"correct horse battery","tenant":"acme"}`))
	f.Add([]byte(`{"email":"a@b","password":"0123456789","tenant":"a-1"}`))
	f.Add([]byte(`{"email":"\"x y\"@example.com","password":"ééééééééééé","tenant":"---"}`))
	f.Add([]byte(`{"email":1}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var q registerRequest
		if decodeJSON(body, &q) != nil || q.validate() != nil {
			return
		}
		if len(q.Tenant) < MinTenant || len(q.Tenant) > MaxTenant || strings.Trim(q.Tenant, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || tenancy.CheckTenantID(q.Tenant) != nil {
			t.Fatalf("accepted tenant %q", q.Tenant)
		}
		if utf8.RuneCountInString(q.Password) < MinPassword || len(q.Password) > MaxPassword {
			t.Fatalf("accepted password of %d bytes", len(q.Password))
		}
		if q.Email != strings.ToLower(q.Email) || !strings.Contains(q.Email, "@") || len(q.Email) > MaxEmail {
			t.Fatalf("accepted email %q", q.Email)
		}
	})
}

// FuzzSmallBodies: the login, key and empty decoders never panic and refuse
// unknown fields.
func FuzzSmallBodies(f *testing.F) {
	f.Add([]byte(`{"email":"ada@example.com","password":"x"}`))
	f.Add([]byte(`{"label":"ci"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"tenant":"other"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var l loginRequest
		var k keyRequest
		var e emptyRequest
		_ = decodeJSON(body, &l)
		_ = decodeJSON(body, &k)
		if decodeJSON(body, &e) == nil && strings.Contains(string(body), `"tenant"`) && !strings.Contains(string(body), `\`) {
			t.Fatalf("the empty body decoder accepted %q", body)
		}
	})
}

// FuzzSessionCookie: only a cookie whose MAC the portal made passes.
func FuzzSessionCookie(f *testing.F) {
	p := &Portal{cfg: Config{Secret: []byte("fuzz-secret-of-at-least-32-bytes-long")}}
	id := make([]byte, 32)
	good := b64url.EncodeToString(id) + "." + b64url.EncodeToString(p.mac(id))
	f.Add(good)
	f.Add("x.y")
	f.Add(good[:len(good)-1] + "A")
	f.Fuzz(func(t *testing.T, v string) {
		// The only MAC the portal made is id's: any cookie accepted names id.
		if got, ok := p.cookieID(v); ok && string(got) != string(id) {
			t.Fatalf("forged cookie %q accepted", v)
		}
	})
}

// FuzzCheckPassword: a stored hash of any shape never panics the check.
func FuzzCheckPassword(f *testing.F) {
	f.Add("scrypt$1024$8$1$c2FsdHNhbHRzYWx0c2FsdA$a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5")
	f.Add("scrypt$0$0$0$$")
	f.Add("bcrypt$x")
	f.Fuzz(func(t *testing.T, stored string) {
		if parts := strings.Split(stored, "$"); len(parts) == 6 {
			n, _ := strconv.Atoi(parts[1])
			r, _ := strconv.Atoi(parts[2])
			p, _ := strconv.Atoi(parts[3])
			if n*r*p > 1<<13 {
				return // keep the fuzzer off costly parameters
			}
		}
		_, _ = checkPassword("password", stored)
	})
}

// TestValidEmailNamesWhatIsWrong: a missing address is said to be missing, not too
// long (a newcomer posting {} read "at most 254 characters"); a long one and a
// display-name form each get their own message.
func TestValidEmailNamesWhatIsWrong(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 "email: missing",
		"   ":                              "email: missing",
		strings.Repeat("a", 250) + "@b.cd": "at most 254 characters",
		"Ada <ada@example.com>":            "plain address",
	} {
		if _, err := validEmail(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validEmail(%q) = %v, want an error with %q", in, err, want)
		}
	}
	if got, err := validEmail(" Ada@Example.com "); err != nil || got != "ada@example.com" {
		t.Errorf("validEmail: %q, %v", got, err)
	}
}
