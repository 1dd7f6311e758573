package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// Entity types of the request (see the package documentation).
const (
	AgentType  = types.EntityType("Agent")
	ActionType = types.EntityType("Action")
	ToolType   = types.EntityType("Tool")
	FloatType  = types.EntityType("Float")
)

// Decisions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// MaxPolicySize caps a policy file.
const MaxPolicySize = 4 << 20

// maxDepth caps the nesting of args and fact values.
const maxDepth = 64

// Policy is a parsed policy file. It is immutable and safe for concurrent use.
type Policy struct {
	set    *cedar.PolicySet
	ids    map[cedar.PolicyID]string // Cedar's positional id -> reported id
	digest string
	name   string
}

// Decision is SPEC.md's PolicyDecision: { decision, reasons, errors, policyDigest }.
// Reasons and Errors are never nil, so they marshal as [] rather than null.
type Decision struct {
	Decision     string   `json:"decision"`
	Reasons      []string `json:"reasons"`
	Errors       []string `json:"errors"`
	PolicyDigest string   `json:"policyDigest"`
}

// Grant is context.grant: the signed delegation's principal and scopes.
type Grant struct {
	Principal string
	Scopes    []string
}

// Request is one tool call to decide.
type Request struct {
	Agent string                     // principal Agent::"<Agent>"
	Tool  string                     // action Action::"<Tool>", resource Tool::"<Tool>"
	Args  json.RawMessage            // context.args; nil is {}
	Facts map[string]json.RawMessage // context.facts, by name; nil is {}
	Grant *Grant                     // context.grant; nil leaves it out (SDK)
}

// Load reads and parses a policy file.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	text, err := io.ReadAll(io.LimitReader(f, MaxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(text) > MaxPolicySize {
		return nil, fmt.Errorf("policy %s is larger than %d bytes", path, MaxPolicySize)
	}
	return Parse(path, text)
}

// Parse parses Cedar policy text; name is used in error messages and positions.
func Parse(name string, text []byte) (*Policy, error) {
	set, err := cedar.NewPolicySetFromBytes(name, text)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	p := &Policy{set: set, ids: map[cedar.PolicyID]string{}, name: name}
	sum := sha256.Sum256(text)
	p.digest = hex.EncodeToString(sum[:])
	seen := map[string]cedar.PolicyID{}
	for pid, po := range set.All() {
		id := string(pid)
		if a, ok := po.Annotations()["id"]; ok {
			id = string(a)
			if id == "" {
				return nil, fmt.Errorf("policy %s: %s: @id(\"\") is empty", name, position(po.Position()))
			}
		}
		if other, dup := seen[id]; dup {
			return nil, fmt.Errorf("policy %s: two policies have the id %q (%s and %s); ids name the deciding policies in receipts, so they must be unique",
				name, id, position(set.Get(other).Position()), position(po.Position()))
		}
		seen[id] = pid
		p.ids[pid] = id
	}
	return p, nil
}

func position(pos cedar.Position) string {
	return fmt.Sprintf("line %d, column %d", pos.Line, pos.Column)
}

// Digest is the hex SHA-256 of the policy text (policyDigest).
func (p *Policy) Digest() string { return p.digest }

// IDs lists the policies' ids, sorted.
func (p *Policy) IDs() []string {
	out := make([]string, 0, len(p.ids))
	for _, id := range p.ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Evaluate decides req. It never fails: a request that cannot be turned into Cedar
// values, like any evaluation error, is a deny with the error recorded.
func (p *Policy) Evaluate(req Request) Decision {
	d := Decision{Decision: Deny, Reasons: []string{}, Errors: []string{}, PolicyDigest: p.digest}
	cedarReq, floats, err := p.request(req)
	if err != nil {
		d.Errors = append(d.Errors, err.Error())
		return d
	}
	dec, diag := cedar.Authorize(p.set, types.EntityMap{}, cedarReq)
	for _, e := range diag.Errors {
		msg := p.ids[e.PolicyID] + ": " + e.Message
		if len(floats) > 0 {
			msg += " (non-integer numbers, which Cedar cannot compare, are Float entity references here: " + strings.Join(floats, ", ") + ")"
		}
		d.Errors = append(d.Errors, msg)
	}
	sort.Strings(d.Errors)
	if len(d.Errors) > 0 {
		// SPEC.md: any evaluation error is a deny. Keep the forbids that fired as
		// reasons; a permit that fired decided nothing.
		if dec == cedar.Allow {
			return d
		}
	}
	for _, r := range diag.Reasons {
		d.Reasons = append(d.Reasons, p.ids[r.PolicyID])
	}
	sort.Strings(d.Reasons)
	if dec == cedar.Allow && len(d.Errors) == 0 {
		d.Decision = Allow
	}
	return d
}

func (p *Policy) request(req Request) (cedar.Request, []string, error) {
	c := &converter{}
	ctx := types.RecordMap{}
	args := req.Args
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	v, ok, err := c.convert(args, "args")
	if err != nil {
		return cedar.Request{}, nil, err
	}
	if ok {
		ctx["args"] = v
	}
	facts := types.RecordMap{}
	names := make([]string, 0, len(req.Facts))
	for n := range req.Facts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v, ok, err := c.convert(req.Facts[n], "facts."+n)
		if err != nil {
			return cedar.Request{}, nil, err
		}
		if ok {
			facts[types.String(n)] = v
		}
	}
	ctx["facts"] = types.NewRecord(facts)
	if req.Grant != nil {
		scopes := make([]types.Value, 0, len(req.Grant.Scopes))
		for _, s := range req.Grant.Scopes {
			scopes = append(scopes, types.String(s))
		}
		ctx["grant"] = types.NewRecord(types.RecordMap{
			"principal": types.String(req.Grant.Principal),
			"scopes":    types.NewSet(scopes...),
		})
	}
	return cedar.Request{
		Principal: types.NewEntityUID(AgentType, types.String(req.Agent)),
		Action:    types.NewEntityUID(ActionType, types.String(req.Tool)),
		Resource:  types.NewEntityUID(ToolType, types.String(req.Tool)),
		Context:   types.NewRecord(ctx),
	}, c.floats, nil
}

// converter turns JSON into Cedar values, noting where it met non-integer numbers.
type converter struct {
	floats []string
}

// convert reads one JSON value; ok is false for null (absent).
func (c *converter) convert(raw json.RawMessage, path string) (types.Value, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, ok, err := c.value(dec, path, 0)
	if err != nil {
		return nil, false, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false, fmt.Errorf("%s: trailing data after the JSON value", path)
	}
	return v, ok, nil
}

func (c *converter) value(dec *json.Decoder, path string, depth int) (types.Value, bool, error) {
	if depth > maxDepth {
		return nil, false, fmt.Errorf("%s: nested more than %d levels deep", path, maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	switch t := tok.(type) {
	case nil:
		return nil, false, nil
	case bool:
		return types.Boolean(t), true, nil
	case string:
		return types.String(t), true, nil
	case json.Number:
		if n, ok := LongOf(string(t)); ok {
			return types.Long(n), true, nil
		}
		c.floats = append(c.floats, path+"="+string(t))
		return types.NewEntityUID(FloatType, types.String(t)), true, nil
	case json.Delim:
		switch t {
		case '{':
			m := types.RecordMap{}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, false, fmt.Errorf("%s: %w", path, err)
				}
				k, _ := kt.(string)
				if seen[k] {
					return nil, false, fmt.Errorf("%s: duplicate key %q", path, k)
				}
				seen[k] = true
				v, ok, err := c.value(dec, path+"."+k, depth+1)
				if err != nil {
					return nil, false, err
				}
				if ok {
					m[types.String(k)] = v
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, false, fmt.Errorf("%s: %w", path, err)
			}
			return types.NewRecord(m), true, nil
		case '[':
			var vs []types.Value
			for i := 0; dec.More(); i++ {
				v, ok, err := c.value(dec, path+"["+strconv.Itoa(i)+"]", depth+1)
				if err != nil {
					return nil, false, err
				}
				if ok {
					vs = append(vs, v)
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, false, fmt.Errorf("%s: %w", path, err)
			}
			return types.NewSet(vs...), true, nil
		}
	}
	return nil, false, fmt.Errorf("%s: unexpected JSON token %v", path, tok)
}

// LongOf reports whether the JSON number text is an integer that fits in a Cedar Long
// (int64), exactly: 12, 12.0, 1.2e1 and 1200e-2 are 12; 12.5, 1e-400 and 1e30 are not.
func LongOf(text string) (int64, bool) {
	s := text
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil {
			return 0, false // absurd exponent; not a Long either way
		}
		exp = e
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) {
		return 0, false
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	if digits == "" {
		return 0, true // zero, however written
	}
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	if exp < 0 || len(digits)+exp > 19 {
		return 0, false
	}
	s = digits + strings.Repeat("0", exp)
	if neg {
		s = "-" + s
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

func allDigits(s string) bool {
	return !slices.ContainsFunc([]byte(s), func(b byte) bool { return b < '0' || b > '9' })
}
