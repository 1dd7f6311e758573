package logserver_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// Issue 17, row 9 (and the invalid-UTF-8 leaf): the shared append path parses its
// body strictly. Case-variant, unknown and repeated keys, leaves that are not valid
// UTF-8 and trailing data get 400 naming the problem, and nothing is appended.
func TestAppendBodyStrict(t *testing.T) {
	l := startTestLog(t)
	for _, c := range []struct{ name, body, want string }{
		{"upper-case key", `{"LEAF":"x"}`, "case-sensitive"},
		{"mixed-case key", `{"Leaf":"x"}`, "case-sensitive"},
		{"case-variant leafHash", `{"leafhash":"` + strings.Repeat("0", 64) + `"}`, "case-sensitive"},
		{"repeated key", `{"leaf":"a","leaf":"b"}`, "appears more than once"},
		{"unknown key beside leaf", `{"leaf":"x","tenant":"acme"}`, "unknown field"},
		{"invalid UTF-8 leaf", "{\"leaf\":\"ab\xff\xfecd\"}", "leaf is not valid UTF-8"},
		{"lone surrogate escape", `{"leaf":"a\ud800b"}`, "lone surrogate"},
		{"not an object", `["leaf","x"]`, "not a JSON object"},
		{"leaf not a string", `{"leaf":{"payload":"x"}}`, "want a JSON string"},
		{"trailing data", `{"leaf":"x"}{"leaf":"y"}`, "trailing data"},
	} {
		code, _, body := do(t, "POST", l.URL+"/append", "default-token", c.body)
		if code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.name, code, body, c.want)
		}
	}
	if code, _, body := do(t, "GET", l.URL+"/root?size=0", "", ""); code != 200 {
		t.Fatalf("root: %d %s", code, body)
	}
	// Valid bodies still go in: escapes, a real U+FFFD, a paired surrogate, whitespace.
	for i, b := range []string{`{"leaf":"caf\u00e9"}`, `{ "leaf" : "a` + "\uFFFD" + `b" }`, `{"leaf":"\ud83d\ude00"}`, "{\"leaf\":\"plain\"}\n"} {
		code, _, body := do(t, "POST", l.URL+"/append", "default-token", b)
		if code != 200 {
			t.Fatalf("valid body %d %s: %d %s", i, b, code, body)
		}
		var p struct {
			Inclusion struct {
				LeafIndex int `json:"leafIndex"`
			} `json:"inclusion"`
		}
		json.Unmarshal([]byte(body), &p)
		if p.Inclusion.LeafIndex != i {
			t.Fatalf("valid body %d got leaf index %d: a refused body was appended", i, p.Inclusion.LeafIndex)
		}
	}
}
