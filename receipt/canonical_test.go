package receipt_test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"svc.dev/svc/receipt"
)

// The expected outputs in this file come from RFC 8785 (sections 3.2.2 to 3.2.4
// and Appendix B), not from running the code under test.

func mustCanon(t *testing.T, in string) string {
	t.Helper()
	out, err := receipt.CanonicalizeJSON([]byte(in))
	if err != nil {
		t.Fatalf("CanonicalizeJSON(%s): %v", in, err)
	}
	return string(out)
}

// RFC 8785 section 3.2.2 input and section 3.2.4 output.
func TestCanonicalizeJSONRFC8785Example(t *testing.T) {
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"` +
		"\u20ac" + `$\u000f\nA'B\"\\\\\"/"}`
	if got := mustCanon(t, in); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// RFC 8785 section 3.2.3: properties are sorted by their UTF-16 code units.
func TestCanonicalizeJSONSortsKeysByUTF16(t *testing.T) {
	in := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := `{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","` + "\u00f6" +
		`":"Latin Small Letter O With Diaeresis","` + "\u20ac" + `":"Euro Sign","` + "\U0001F600" +
		`":"Emoji: Grinning Face","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}`
	if got := mustCanon(t, in); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// The emoji (U+1F600, UTF-16 D83D DE00) sorts before U+FB33 although its code
	// point is larger: a sort by code point or by UTF-8 bytes would get this wrong.
	got := mustCanon(t, `{"\ufb33":1,"\ud83d\ude00":2}`)
	if want := `{"` + "\U0001F600" + `":2,"` + "\ufb33" + `":1}`; got != want {
		t.Errorf("surrogate ordering: got %q, want %q", got, want)
	}
	// Nested objects are sorted too; arrays keep their order.
	if got, want := mustCanon(t, `{"b":[3,1,2],"a":{"z":1,"y":{"d":1,"c":2}}}`),
		`{"a":{"y":{"c":2,"d":1},"z":1},"b":[3,1,2]}`; got != want {
		t.Errorf("nested: got %s, want %s", got, want)
	}
}

// RFC 8785 Appendix B: IEEE 754 doubles and their canonical JSON text.
func TestCanonicalizeJSONNumbersAppendixB(t *testing.T) {
	cases := []struct{ bits, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"}, // minus zero
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	}
	for _, c := range cases {
		u, err := strconv.ParseUint(c.bits, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		f := math.Float64frombits(u)
		// Any JSON text that denotes the double will do as input; use two spellings.
		for _, in := range []string{strconv.FormatFloat(f, 'e', -1, 64), strconv.FormatFloat(f, 'g', 17, 64)} {
			if got := mustCanon(t, "["+in+"]"); got != "["+c.want+"]" {
				t.Errorf("%s (input %s): got %s, want [%s]", c.bits, in, got, c.want)
			}
		}
	}
}

func TestCanonicalizeJSONNumberSpellings(t *testing.T) {
	cases := map[string]string{
		"1e+30":                         "1e+30",
		"1E30":                          "1e+30",
		"1.0":                           "1",
		"-0":                            "0",
		"-0.0":                          "0",
		"4.50":                          "4.5",
		"2e-3":                          "0.002",
		"0.000001":                      "0.000001",
		"0.0000001":                     "1e-7",
		"1e21":                          "1e+21",
		"1e20":                          "100000000000000000000",
		"100":                           "100",
		"-12.5e1":                       "-125",
		"0.000000000000000000000000001": "1e-27",
		"333333333.33333329":            "333333333.3333333",
		"12345678901234567890":          "12345678901234567000",
	}
	for in, want := range cases {
		if got := mustCanon(t, in); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
		if got := mustCanon(t, `{"n":`+in+`}`); got != `{"n":`+want+`}` {
			t.Errorf("%s in an object: got %s", in, got)
		}
	}
}

func TestCanonicalizeJSONStrings(t *testing.T) {
	cases := []struct{ in, want string }{
		// Only " and \ and the control characters are escaped; the five with a
		// short form use it, the rest use \u00xx with lowercase hex.
		{`"\"\\\b\f\n\r\t"`, `"\"\\\b\f\n\r\t"`},
		{`"\u0000\u0001\u001F\u001f"`, `"\u0000\u0001\u001f\u001f"`},
		{`"\u0008\u000C\u000a\u000D\u0009"`, `"\b\f\n\r\t"`},
		// HTML characters are not escaped (Go's encoding/json would write \u003c).
		{`"<a href='x'>&amp;</a>"`, `"<a href='x'>&amp;</a>"`},
		{`"\u003c\u003e\u0026"`, `"<>&"`},
		// The solidus escape is removed.
		{`"a\/b"`, `"a/b"`},
		// DEL (U+007F) is not a control character for JSON: written as is.
		{`"\u007f"`, "\"\x7f\""},
		// Non-ASCII is written as UTF-8, whether it came escaped or not.
		{`"\u00e9t\u00e9"`, "\"\u00e9t\u00e9\""},
		{"\"\u00e9t\u00e9\"", "\"\u00e9t\u00e9\""},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"\ud83d\ude00"`, "\"\U0001F600\""},
	}
	for _, c := range cases {
		if got := mustCanon(t, c.in); got != c.want {
			t.Errorf("%s: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCanonicalizeJSONWhitespaceAndLiterals(t *testing.T) {
	in := " \t\r\n{ \"a\" :\n[ 1 ,\t2 , { } , [ ] ] ,\r\n \"b\" : \"x y\" , \"c\" : null , \"d\" : true , \"e\" : false } \n"
	want := `{"a":[1,2,{},[]],"b":"x y","c":null,"d":true,"e":false}`
	if got := mustCanon(t, in); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	for _, scalar := range []string{"true", "false", "null", `"s"`, "7"} {
		if got := mustCanon(t, " "+scalar+" \n"); got != scalar {
			t.Errorf("top-level %s: got %s", scalar, got)
		}
	}
}

func TestCanonicalizeJSONRejects(t *testing.T) {
	bad := map[string]string{
		"duplicate key":                  `{"a":1,"a":2}`,
		"duplicate key nested":           `{"x":{"a":1,"b":2,"a":3}}`,
		"duplicate key spelled escaped":  `{"a":1,"\u0061":2}`,
		"duplicate key in array element": `[{"k":1,"k":1}]`,
		"empty":                          ``,
		"only whitespace":                " \n",
		"trailing value":                 `{} {}`,
		"trailing garbage":               `{"a":1} x`,
		"trailing bracket":               `{"a":1}]`,
		"unterminated object":            `{"a":1`,
		"unterminated string":            `"abc`,
		"trailing comma":                 `[1,2,]`,
		"leading comma":                  `[,1]`,
		"missing colon":                  `{"a" 1}`,
		"single quotes":                  `{'a':1}`,
		"NaN":                            `[NaN]`,
		"Infinity":                       `[Infinity]`,
		"out of double range":            `[1e400]`,
		"leading zero":                   `[01]`,
		"leading plus":                   `[+1]`,
		"hex number":                     `[0x10]`,
		"bare dot":                       `[.5]`,
		"raw control char in string":     "[\"a\x01b\"]",
		"bad escape":                     `["\x"]`,
		"lone high surrogate":            `["\ud800"]`,
		"lone low surrogate":             `["\udc00"]`,
		"high surrogate then non-low":    `["\ud800\u0041"]`,
		"invalid UTF-8":                  "[\"\xff\"]",
		"truncated UTF-8":                "[\"\xc3\"]",
		"bare word":                      `[tru]`,
		"split number":                   `[1 2]`,
		"comment":                        `{"a":1 /* c */}`,
	}
	for name, in := range bad {
		if out, err := receipt.CanonicalizeJSON([]byte(in)); err == nil {
			t.Errorf("%s: %q accepted as %q", name, in, out)
		}
	}
	if _, err := receipt.CanonicalizeJSON(nil); err == nil {
		t.Error("nil input accepted")
	}
}

// Canonical marshals Go values with encoding/json and then canonicalizes, so
// Go's HTML escaping and map/struct ordering must not leak into the result.
func TestCanonicalGoValues(t *testing.T) {
	type inner struct {
		Z string `json:"z"`
		A string `json:"a"`
	}
	v := map[string]any{
		"html":   "<script>&</script>",
		"uni":    "\u00f6\u2028",
		"struct": inner{Z: "last", A: "first"},
		"float":  4.50,
		"int":    int64(1) << 53,
		"neg0":   math.Copysign(0, -1),
		"bytes":  []byte("hi"),
		"nil":    nil,
		"empty":  []string{},
	}
	got, err := receipt.Canonical(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"bytes":"aGk=","empty":[],"float":4.5,"html":"<script>&</script>","int":9007199254740992,"neg0":0,"nil":null,` +
		`"struct":{"a":"first","z":"last"},"uni":"` + "\u00f6\u2028" + `"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := receipt.Canonical(math.NaN()); err == nil {
		t.Error("NaN accepted")
	}
	if _, err := receipt.Canonical(make(chan int)); err == nil {
		t.Error("a channel accepted")
	}
}

func strp(s string) *string { return &s }

// basePredicate is a minimal SDK receipt predicate.
func basePredicate() receipt.Predicate {
	return receipt.Predicate{
		ReceiptID: "r1",
		Timestamp: "2026-01-02T03:04:05.006Z",
		Issuer:    receipt.IssuerInfo{Kind: receipt.KindSDK, KeyID: "k", Version: "0.6.1"},
		Principal: receipt.Principal{Provenance: receipt.Claimed},
		Agent:     receipt.Agent{ID: "a", Provenance: receipt.Claimed},
		Session:   receipt.Session{Provenance: receipt.Claimed},
		Model:     receipt.Model{Provenance: receipt.Claimed},
		Tool:      receipt.Tool{Name: "t", Provenance: receipt.Claimed},
		Request:   receipt.Request{Args: json.RawMessage(`{ "x" : 1 }`), ArgsDigest: "d", Provenance: receipt.Claimed},
		Facts:     map[string]receipt.Fact{},
		Execution: receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{"ok":true}`),
			ResultDigest: "rd", Provenance: receipt.Claimed},
	}
}

// The exact canonical text of a minimal predicate, written by hand from
// SPEC.md's field names: optional fields absent, null fields null, keys sorted.
func TestCanonicalPredicateExact(t *testing.T) {
	got, err := receipt.Canonical(basePredicate())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"agent":{"id":"a","provenance":"claimed"},` +
		`"execution":{"provenance":"claimed","result":{"ok":true},"resultDigest":"rd","status":"executed"},` +
		`"facts":{},` +
		`"issuer":{"keyid":"k","kind":"sdk","version":"0.6.1"},` +
		`"model":{"id":null,"provenance":"claimed"},` +
		`"policy":null,` +
		`"principal":{"id":null,"provenance":"claimed"},` +
		`"receiptId":"r1",` +
		`"request":{"args":{"x":1},"argsDigest":"d","provenance":"claimed"},` +
		`"session":{"id":null,"provenance":"claimed","toolUseId":null},` +
		`"timestamp":"2026-01-02T03:04:05.006Z",` +
		`"tool":{"name":"t","provenance":"claimed"}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Digest is the hex SHA-256 of exactly those bytes.
	d, err := receipt.Digest(basePredicate())
	if err != nil {
		t.Fatal(err)
	}
	if d != sha256Hex([]byte(want)) {
		t.Errorf("Digest = %s, want sha256 of the canonical text %s", d, sha256Hex([]byte(want)))
	}
}

func TestCanonicalOptionalAndNullFields(t *testing.T) {
	key := testKey(t, 1)
	p := basePredicate()
	p.Policy = nil
	p.Delegation = nil
	c, err := receipt.Canonical(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(c, &m); err != nil {
		t.Fatal(err)
	}
	if string(m["policy"]) != "null" {
		t.Errorf(`policy = %s, want null`, m["policy"])
	}
	for _, absent := range []string{"delegation", "consumed", "authorization"} {
		if _, ok := m[absent]; ok {
			t.Errorf("%s present although unset: %s", absent, c)
		}
	}
	for _, absent := range []string{`"framework"`, `"upstream"`, `"keyid":""`, `"reason"`, `"error"`} {
		if strings.Contains(string(c), absent) {
			t.Errorf("%s present although unset: %s", absent, c)
		}
	}

	grant := receipt.Sign(receipt.PayloadDelegation, []byte(`{}`), key)
	p.Delegation = &receipt.Delegation{Envelope: grant, Provenance: receipt.Attested}
	p.Policy = &receipt.Policy{Decision: receipt.Allow, Reasons: []string{}, Errors: []string{}, PolicyDigest: "pd", Provenance: receipt.Observed}
	p.Consumed = &receipt.Consumed{FactIDs: []string{"f1"}, Provenance: receipt.Observed}
	p.Principal = receipt.Principal{ID: strp("alice"), KeyID: key.KeyID(), Provenance: receipt.Attested}
	p.Issuer.Framework = "fw"
	c, err = receipt.Canonical(p)
	if err != nil {
		t.Fatal(err)
	}
	m = nil
	if err := json.Unmarshal(c, &m); err != nil {
		t.Fatal(err)
	}
	if want := `{"decision":"allow","errors":[],"policyDigest":"pd","provenance":"observed","reasons":[]}`; string(m["policy"]) != want {
		t.Errorf("policy = %s, want %s", m["policy"], want)
	}
	if want := `{"factIds":["f1"],"provenance":"observed"}`; string(m["consumed"]) != want {
		t.Errorf("consumed = %s, want %s", m["consumed"], want)
	}
	if want := `{"envelope":` + string(envelopeCanonicalByHand(grant)) + `,"provenance":"attested"}`; string(m["delegation"]) != want {
		t.Errorf("delegation = %s\nwant %s", m["delegation"], want)
	}
	if want := `{"id":"alice","keyid":"` + key.KeyID() + `","provenance":"attested"}`; string(m["principal"]) != want {
		t.Errorf("principal = %s, want %s", m["principal"], want)
	}
	if want := `{"framework":"fw","keyid":"k","kind":"sdk","version":"0.6.1"}`; string(m["issuer"]) != want {
		t.Errorf("issuer = %s, want %s", m["issuer"], want)
	}
}

func TestDigestJSONMatchesSHA256OfCanonical(t *testing.T) {
	cases := map[string]string{
		`{"b": 2, "a": 1}`:           `{"a":1,"b":2}`,
		`{}`:                         `{}`,
		` [ 1.0 , "\u0041" ] `:       `[1,"A"]`,
		`{"q":"<&>","n":-0}`:         `{"n":0,"q":"<&>"}`,
		`{"path":"\/tmp\/x","z":{}}`: `{"path":"/tmp/x","z":{}}`,
	}
	for in, canon := range cases {
		d, err := receipt.DigestJSON([]byte(in))
		if err != nil {
			t.Fatalf("DigestJSON(%s): %v", in, err)
		}
		if want := sha256Hex([]byte(canon)); d != want {
			t.Errorf("DigestJSON(%s) = %s, want %s", in, d, want)
		}
	}
	if _, err := receipt.DigestJSON([]byte(`{"a":1,"a":1}`)); err == nil {
		t.Error("DigestJSON accepted a duplicate key")
	}
	// Digest of a Go value and DigestJSON of its JSON agree.
	d1, err := receipt.Digest(map[string]any{"b": []int{1, 2}, "a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256Hex([]byte(`{"a":"x","b":[1,2]}`)); d1 != want {
		t.Errorf("Digest = %s, want %s", d1, want)
	}
	// ResultDigest is the digest of the result JSON.
	rd, err := receipt.ResultDigest(json.RawMessage(`{"content":[{"type":"text","text":"hi"}],"isError":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256Hex([]byte(`{"content":[{"text":"hi","type":"text"}],"isError":false}`)); rd != want {
		t.Errorf("ResultDigest = %s, want %s", rd, want)
	}
}

func TestNewStatement(t *testing.T) {
	st, err := receipt.NewStatement("search", "id-1", "abc", receipt.PredicateReceipt, map[string]int{"z": 1, "a": 2})
	if err != nil {
		t.Fatal(err)
	}
	c, err := receipt.Canonical(st)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"_type":"https://in-toto.io/Statement/v1","predicate":{"a":2,"z":1},"predicateType":"https://svc.dev/spec/receipt/v0.2",` +
		`"subject":[{"digest":{"sha256":"abc"},"name":"tool-call:search:id-1"}]}`
	if string(c) != want {
		t.Errorf("got  %s\nwant %s", c, want)
	}
	if receipt.PredicateAuthorization != "https://svc.dev/spec/authorization/v0.1" {
		t.Errorf("PredicateAuthorization = %s", receipt.PredicateAuthorization)
	}
	d, err := st.SubjectDigest()
	if err != nil || d != "abc" {
		t.Errorf("SubjectDigest = %q, %v", d, err)
	}
	st.Subject = append(st.Subject, st.Subject[0])
	if _, err := st.SubjectDigest(); err == nil {
		t.Error("SubjectDigest accepted two subjects")
	}
}
