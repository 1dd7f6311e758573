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

// jcsMembers writes the members of one object in the order given, which must be
// sorted, with a comma before all but the first.
type jcsMembers struct {
	w     *jcsWriter
	first bool
}

// object opens an object; end closes it.
func (w *jcsWriter) object() jcsMembers {
	w.lit("{")
	return jcsMembers{w: w, first: true}
}

// next writes the comma before a member but the first.
func (o *jcsMembers) next() *jcsWriter {
	if !o.first {
		o.w.b = append(o.w.b, ',')
	}
	o.first = false
	return o.w
}

// key writes a member's name, a constant that needs no escape, and returns the writer
// for its value.
func (o *jcsMembers) key(name string) *jcsWriter {
	w := o.next()
	w.b = append(append(append(w.b, '"'), name...), '"', ':')
	return w
}

// name writes a member's name taken from data, escaped, and returns the writer for
// its value.
func (o *jcsMembers) name(name string) *jcsWriter {
	w := o.next()
	w.str(name)
	w.lit(":")
	return w
}

func (o *jcsMembers) end() { o.w.lit("}") }

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
	o := w.object()
	if pa.ok {
		o.key("args").canon(pa.args, withinMember)
	} else {
		o.key("args").json(r.Args, withinMember)
	}
	o.key("argsDigest").str(r.ArgsDigest)
	o.key("provenance").str(string(r.Provenance))
	o.end()
}

func (w *jcsWriter) agent(a Agent) {
	o := w.object()
	o.key("id").str(a.ID)
	o.key("provenance").str(string(a.Provenance))
	o.end()
}

func (w *jcsWriter) facts(facts map[string]Fact) {
	if facts == nil {
		w.lit("null")
		return
	}
	o := w.object()
	for _, name := range slices.SortedFunc(maps.Keys(facts), compareUTF16) {
		f := facts[name]
		fo := o.name(name).object()
		fo.key("args").json(f.Args, withinFact)
		fo.key("provenance").str(string(f.Provenance))
		fo.key("resultDigest").str(f.ResultDigest)
		fo.key("tool").str(f.Tool)
		fo.key("value").json(f.Value, withinFact)
		fo.end()
	}
	o.end()
}

func (w *jcsWriter) issuer(is IssuerInfo) {
	o := w.object()
	if is.Framework != "" {
		o.key("framework").str(is.Framework)
	}
	o.key("keyid").str(is.KeyID)
	o.key("kind").str(is.Kind)
	o.key("version").str(is.Version)
	o.end()
}

func (w *jcsWriter) policy(p *Policy) {
	if p == nil {
		w.lit("null")
		return
	}
	o := w.object()
	o.key("decision").str(p.Decision)
	o.key("errors").strs(p.Errors)
	o.key("policyDigest").str(p.PolicyDigest)
	o.key("provenance").str(string(p.Provenance))
	o.key("reasons").strs(p.Reasons)
	o.end()
}

func (w *jcsWriter) principal(p Principal) {
	o := w.object()
	o.key("id").optStr(p.ID)
	if p.KeyID != "" {
		o.key("keyid").str(p.KeyID)
	}
	o.key("provenance").str(string(p.Provenance))
	o.end()
}

func (w *jcsWriter) tool(t Tool) {
	o := w.object()
	if t.DefinitionDigest != "" {
		o.key("definitionDigest").str(t.DefinitionDigest)
	}
	if t.DefinitionLeafIndex != nil {
		o.key("definitionLeafIndex").uint(*t.DefinitionLeafIndex)
	}
	o.key("name").str(t.Name)
	o.key("provenance").str(string(t.Provenance))
	if t.Upstream != "" {
		o.key("upstream").str(t.Upstream)
	}
	o.end()
}

// leading writes the opening members of both predicates, agent to delegation (an
// authorization predicate has no authorization member).
func (o *jcsMembers) leading(a Agent, auth *Authorization, c *Consumed, d *Delegation) {
	o.key("agent").agent(a)
	if auth != nil {
		ao := o.key("authorization").object()
		ao.key("envelope").envelope(auth.Envelope)
		io := ao.key("inclusion").object()
		io.key("hashes").strs(auth.Inclusion.Hashes)
		io.key("leafIndex").uint(auth.Inclusion.LeafIndex)
		io.key("treeSize").uint(auth.Inclusion.TreeSize)
		io.end()
		ao.key("treeHead").envelope(auth.TreeHead)
		ao.end()
	}
	if c != nil {
		co := o.key("consumed").object()
		co.key("factIds").strs(c.FactIDs)
		co.key("provenance").str(string(c.Provenance))
		co.end()
	}
	if d != nil {
		do := o.key("delegation").object()
		do.key("envelope").envelope(d.Envelope)
		do.key("provenance").str(string(d.Provenance))
		do.end()
	}
}

// appendCanonicalPredicate writes Canonical(p); ok is false when a string is not valid
// UTF-8 (the caller takes the general path), and err when embedded JSON is not valid.
// result, when ok, is p.Execution.Result canonicalized.
func appendCanonicalPredicate(b []byte, p *Predicate, pa predicateArgs, result *canonicalJSON) (out []byte, ok bool, err error) {
	w := jcsWriter{b: b}
	o := w.object()
	o.leading(p.Agent, p.Authorization, p.Consumed, p.Delegation)
	o.key("execution").execution(p.Execution, result)
	o.key("facts").facts(p.Facts)
	o.key("issuer").issuer(p.Issuer)
	mo := o.key("model").object()
	mo.key("id").optStr(p.Model.ID)
	mo.key("provenance").str(string(p.Model.Provenance))
	mo.end()
	o.key("policy").policy(p.Policy)
	o.key("principal").principal(p.Principal)
	o.key("receiptId").str(p.ReceiptID)
	if p.Relayed != nil {
		o.key("relayed").relayed(p.Relayed)
	}
	o.key("request").request(p.Request, pa)
	so := o.key("session").object()
	so.key("id").optStr(p.Session.ID)
	so.key("provenance").str(string(p.Session.Provenance))
	so.key("toolUseId").optStr(p.Session.ToolUseID)
	so.end()
	o.key("timestamp").str(p.Timestamp)
	o.key("tool").tool(p.Tool)
	o.end()
	return w.b, !w.bad, w.err
}

// relayed writes the relayed member: provenance, then requests by method in order.
func (w *jcsWriter) relayed(r *Relayed) {
	o := w.object()
	o.key("provenance").str(string(r.Provenance))
	if r.Requests == nil {
		o.key("requests").lit("null")
	} else {
		ro := o.key("requests").object()
		for _, m := range slices.SortedFunc(maps.Keys(r.Requests), compareUTF16) {
			ro.name(m).uint(r.Requests[m])
		}
		ro.end()
	}
	o.end()
}

// execution writes the execution member; result, when not nil, is its Result
// canonicalized already.
func (w *jcsWriter) execution(e Execution, result *canonicalJSON) {
	o := w.object()
	if e.Error != "" {
		o.key("error").str(e.Error)
	}
	o.key("provenance").str(string(e.Provenance))
	if e.Reason != "" {
		o.key("reason").str(e.Reason)
	}
	if len(e.Result) > 0 && result != nil {
		o.key("result").canon(*result, withinMember)
	} else if len(e.Result) > 0 {
		o.key("result").json(e.Result, withinMember)
	}
	if e.ResultDigest != "" {
		o.key("resultDigest").str(e.ResultDigest)
	}
	o.key("status").str(e.Status)
	if len(e.Upstream) > 0 {
		o.key("upstream").json(e.Upstream, withinMember)
	}
	o.end()
}

// appendCanonicalAuthorization writes Canonical(p) as appendCanonicalPredicate does.
func appendCanonicalAuthorization(b []byte, p *AuthorizationPredicate, pa predicateArgs) (out []byte, ok bool, err error) {
	w := jcsWriter{b: b}
	o := w.object()
	o.leading(p.Agent, nil, p.Consumed, p.Delegation)
	o.key("facts").facts(p.Facts)
	o.key("issuer").issuer(p.Issuer)
	o.key("policy").policy(p.Policy)
	o.key("principal").principal(p.Principal)
	o.key("receiptId").str(p.ReceiptID)
	o.key("request").request(p.Request, pa)
	o.key("timestamp").str(p.Timestamp)
	o.key("tool").tool(p.Tool)
	o.end()
	return w.b, !w.bad, w.err
}
