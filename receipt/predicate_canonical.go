package receipt

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// The receipt and authorization predicates are written here in RFC 8785 form in one
// pass, members in sorted order, which is what Canonical(pred) computes through
// encoding/json and a re-parse (FuzzPredicateCanonical checks both against each
// other). Embedded JSON (arguments, fact values, the result, an upstream
// attestation) is canonicalized where it stands, counting the enclosing members
// towards the nesting limit as the re-parse does. A Go string that is not valid UTF-8
// (encoding/json would rewrite it) declines the direct path.

// jcsWriter appends canonical JSON. bad: a string is not valid UTF-8; err: embedded
// JSON is not valid.
type jcsWriter struct {
	b   []byte
	bad bool
	err error
}

func (w *jcsWriter) lit(s string) { w.b = append(w.b, s...) }

func (w *jcsWriter) str(s string) {
	if !utf8.ValidString(s) {
		w.bad = true
		return
	}
	w.b = appendJCSString(w.b, s)
}

// optStr writes a *string as encoding/json does: null when nil.
func (w *jcsWriter) optStr(s *string) {
	if s == nil {
		w.lit("null")
		return
	}
	w.str(*s)
}

// strs writes a []string: null when nil.
func (w *jcsWriter) strs(ss []string) {
	if ss == nil {
		w.lit("null")
		return
	}
	w.b = append(w.b, '[')
	for i, s := range ss {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.str(s)
	}
	w.b = append(w.b, ']')
}

// json writes embedded JSON found inside `within` arrays and objects: null when nil,
// as encoding/json writes a nil RawMessage.
func (w *jcsWriter) json(raw json.RawMessage, within int) {
	if raw == nil {
		w.lit("null")
		return
	}
	c, err := canonicalize(raw, within)
	if err != nil {
		w.fail(err)
		return
	}
	w.b = append(w.b, c.text...)
}

// canon writes JSON canonicalized already (at depth 0) found inside `within` arrays
// and objects.
func (w *jcsWriter) canon(c canonicalJSON, within int) {
	if within+c.depth > jcsMaxDepth {
		w.fail(errors.New("nesting deeper than " + strconv.Itoa(jcsMaxDepth)))
		return
	}
	w.b = append(w.b, c.text...)
}

// endProvenance writes the last member of most records, and closes the record.
func (w *jcsWriter) endProvenance(p Provenance) {
	w.lit(`,"provenance":`)
	w.str(string(p))
	w.lit("}")
}

func (w *jcsWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *jcsWriter) envelope(e *Envelope) {
	if e == nil {
		w.lit("null")
		return
	}
	b, ok := e.appendCanonical(w.b)
	if !ok {
		w.bad = true
		return
	}
	w.b = b
}

// uint writes n as RFC 8785 does: an integer of more than 15 digits goes through a
// double, as the re-parse of encoding/json's digits does.
func (w *jcsWriter) uint(n uint64) {
	if n < 1e15 {
		w.b = strconv.AppendUint(w.b, n, 10)
		return
	}
	s, err := jcs.NumberToJSON(float64(n))
	if err != nil {
		w.fail(err)
		return
	}
	w.b = append(w.b, s...)
}

// Depths of the embedded JSON values below the predicate (itself at depth 1).
const (
	withinMember = 2 // predicate.request.args, predicate.execution.result
	withinFact   = 3 // predicate.facts.<name>.args
)

// predicateArgs is what the predicates share up to their request: the arguments in
// canonical form, computed once when the call was begun.
type predicateArgs struct {
	args canonicalJSON
	ok   bool // args holds Request.Args canonicalized
}

func (w *jcsWriter) request(r Request, pa predicateArgs) {
	w.lit(`{"args":`)
	if pa.ok {
		w.canon(pa.args, withinMember)
	} else {
		w.json(r.Args, withinMember)
	}
	w.lit(`,"argsDigest":`)
	w.str(r.ArgsDigest)
	w.endProvenance(r.Provenance)
}

func (w *jcsWriter) agent(a Agent) {
	w.lit(`{"id":`)
	w.str(a.ID)
	w.endProvenance(a.Provenance)
}

func (w *jcsWriter) facts(facts map[string]Fact) {
	if facts == nil {
		w.lit("null")
		return
	}
	w.lit("{")
	for i, name := range slices.SortedFunc(maps.Keys(facts), compareUTF16) {
		if i > 0 {
			w.lit(",")
		}
		f := facts[name]
		w.str(name)
		w.lit(`:{"args":`)
		w.json(f.Args, withinFact)
		w.lit(`,"provenance":`)
		w.str(string(f.Provenance))
		w.lit(`,"resultDigest":`)
		w.str(f.ResultDigest)
		w.lit(`,"tool":`)
		w.str(f.Tool)
		w.lit(`,"value":`)
		w.json(f.Value, withinFact)
		w.lit("}")
	}
	w.lit("}")
}

func (w *jcsWriter) issuer(is IssuerInfo) {
	w.lit("{")
	if is.Framework != "" {
		w.lit(`"framework":`)
		w.str(is.Framework)
		w.lit(",")
	}
	w.lit(`"keyid":`)
	w.str(is.KeyID)
	w.lit(`,"kind":`)
	w.str(is.Kind)
	w.lit(`,"version":`)
	w.str(is.Version)
	w.lit("}")
}

func (w *jcsWriter) policy(p *Policy) {
	if p == nil {
		w.lit("null")
		return
	}
	w.lit(`{"decision":`)
	w.str(p.Decision)
	w.lit(`,"errors":`)
	w.strs(p.Errors)
	w.lit(`,"policyDigest":`)
	w.str(p.PolicyDigest)
	w.lit(`,"provenance":`)
	w.str(string(p.Provenance))
	w.lit(`,"reasons":`)
	w.strs(p.Reasons)
	w.lit("}")
}

func (w *jcsWriter) principal(p Principal) {
	w.lit(`{"id":`)
	w.optStr(p.ID)
	if p.KeyID != "" {
		w.lit(`,"keyid":`)
		w.str(p.KeyID)
	}
	w.endProvenance(p.Provenance)
}

func (w *jcsWriter) tool(t Tool) {
	w.lit(`{`)
	if t.DefinitionDigest != "" {
		w.lit(`"definitionDigest":`)
		w.str(t.DefinitionDigest)
		w.lit(`,`)
	}
	if t.DefinitionLeafIndex != nil {
		w.lit(`"definitionLeafIndex":`)
		w.uint(*t.DefinitionLeafIndex)
		w.lit(`,`)
	}
	w.lit(`"name":`)
	w.str(t.Name)
	w.lit(`,"provenance":`)
	w.str(string(t.Provenance))
	if t.Upstream != "" {
		w.lit(`,"upstream":`)
		w.str(t.Upstream)
	}
	w.lit("}")
}

// leading writes the opening members of both predicates, agent to delegation (an
// authorization predicate has no authorization member).
func (w *jcsWriter) leading(a Agent, auth *Authorization, c *Consumed, d *Delegation) {
	w.lit(`{"agent":`)
	w.agent(a)
	if auth != nil {
		w.lit(`,"authorization":{"envelope":`)
		w.envelope(auth.Envelope)
		w.lit(`,"inclusion":{"hashes":`)
		w.strs(auth.Inclusion.Hashes)
		w.lit(`,"leafIndex":`)
		w.uint(auth.Inclusion.LeafIndex)
		w.lit(`,"treeSize":`)
		w.uint(auth.Inclusion.TreeSize)
		w.lit(`},"treeHead":`)
		w.envelope(auth.TreeHead)
		w.lit("}")
	}
	if c != nil {
		w.lit(`,"consumed":{"factIds":`)
		w.strs(c.FactIDs)
		w.endProvenance(c.Provenance)
	}
	if d != nil {
		w.lit(`,"delegation":{"envelope":`)
		w.envelope(d.Envelope)
		w.endProvenance(d.Provenance)
	}
}

// appendCanonicalPredicate writes Canonical(p); ok is false when a string is not valid
// UTF-8 (the caller takes the general path), and err when embedded JSON is not valid.
// result, when ok, is p.Execution.Result canonicalized.
func appendCanonicalPredicate(b []byte, p *Predicate, pa predicateArgs, result *canonicalJSON) (out []byte, ok bool, err error) {
	w := jcsWriter{b: b}
	w.leading(p.Agent, p.Authorization, p.Consumed, p.Delegation)
	w.lit(`,"execution":`)
	w.execution(p.Execution, result)
	w.lit(`,"facts":`)
	w.facts(p.Facts)
	w.lit(`,"issuer":`)
	w.issuer(p.Issuer)
	w.lit(`,"model":{"id":`)
	w.optStr(p.Model.ID)
	w.endProvenance(p.Model.Provenance)
	w.lit(`,"policy":`)
	w.policy(p.Policy)
	w.lit(`,"principal":`)
	w.principal(p.Principal)
	w.lit(`,"receiptId":`)
	w.str(p.ReceiptID)
	if p.Relayed != nil {
		w.lit(`,"relayed":`)
		w.relayed(p.Relayed)
	}
	w.lit(`,"request":`)
	w.request(p.Request, pa)
	w.lit(`,"session":{"id":`)
	w.optStr(p.Session.ID)
	w.lit(`,"provenance":`)
	w.str(string(p.Session.Provenance))
	w.lit(`,"toolUseId":`)
	w.optStr(p.Session.ToolUseID)
	w.lit(`},"timestamp":`)
	w.str(p.Timestamp)
	w.lit(`,"tool":`)
	w.tool(p.Tool)
	w.lit("}")
	return w.b, !w.bad, w.err
}

// relayed writes the relayed member: provenance, then requests by method in order.
func (w *jcsWriter) relayed(r *Relayed) {
	w.lit(`{"provenance":`)
	w.str(string(r.Provenance))
	w.lit(`,"requests":`)
	if r.Requests == nil {
		w.lit("null}")
		return
	}
	w.lit("{")
	for i, m := range slices.SortedFunc(maps.Keys(r.Requests), compareUTF16) {
		if i > 0 {
			w.lit(",")
		}
		w.str(m)
		w.lit(":")
		w.uint(r.Requests[m])
	}
	w.lit("}}")
}

// execution writes the execution member; result, when not nil, is its Result
// canonicalized already.
func (w *jcsWriter) execution(e Execution, result *canonicalJSON) {
	w.lit("{")
	if e.Error != "" {
		w.lit(`"error":`)
		w.str(e.Error)
		w.lit(",")
	}
	w.lit(`"provenance":`)
	w.str(string(e.Provenance))
	if e.Reason != "" {
		w.lit(`,"reason":`)
		w.str(e.Reason)
	}
	if len(e.Result) > 0 {
		w.lit(`,"result":`)
		if result != nil {
			w.canon(*result, withinMember)
		} else {
			w.json(e.Result, withinMember)
		}
	}
	if e.ResultDigest != "" {
		w.lit(`,"resultDigest":`)
		w.str(e.ResultDigest)
	}
	w.lit(`,"status":`)
	w.str(e.Status)
	if len(e.Upstream) > 0 {
		w.lit(`,"upstream":`)
		w.json(e.Upstream, withinMember)
	}
	w.lit("}")
}

// appendCanonicalAuthorization writes Canonical(p) as appendCanonicalPredicate does.
func appendCanonicalAuthorization(b []byte, p *AuthorizationPredicate, pa predicateArgs) (out []byte, ok bool, err error) {
	w := jcsWriter{b: b}
	w.leading(p.Agent, nil, p.Consumed, p.Delegation)
	w.lit(`,"facts":`)
	w.facts(p.Facts)
	w.lit(`,"issuer":`)
	w.issuer(p.Issuer)
	w.lit(`,"policy":`)
	w.policy(p.Policy)
	w.lit(`,"principal":`)
	w.principal(p.Principal)
	w.lit(`,"receiptId":`)
	w.str(p.ReceiptID)
	w.lit(`,"request":`)
	w.request(p.Request, pa)
	w.lit(`,"timestamp":`)
	w.str(p.Timestamp)
	w.lit(`,"tool":`)
	w.tool(p.Tool)
	w.lit("}")
	return w.b, !w.bad, w.err
}
