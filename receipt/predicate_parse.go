package receipt

import (
	"encoding/json"
)

// The receipt and authorization predicates of a signed statement are in the canonical
// form appendCanonicalPredicate and appendCanonicalAuthorization write (the statement
// is signed canonical). decodeCanonicalPredicate and decodeCanonicalAuthorization read
// that form without encoding/json's reflection, which cost a fifth of verifying a
// gateway bundle in a batch: they follow the layout member by member, give up (false)
// at the first byte that differs (an escape in a string, another order, whitespace, an
// unknown or duplicated member, or the rare relayed member), and accept a result only
// if writing it back gives the predicate byte for byte. Such bytes are Canonical of
// the result, which encoding/json decodes to the same value
// (FuzzDecodeCanonicalPredicate), so DecodePredicate answers as unmarshalStrict would.
// Anything else takes the general path.

// decodeCanonicalPredicate reads a receipt predicate in canonical form.
func decodeCanonicalPredicate(raw []byte) (*Predicate, bool) {
	p := predicateParser{fileFormParser{data: raw}}
	var q Predicate
	p.lit(`{"agent":`)
	q.Agent = p.agent()
	if p.try(`,"authorization":`) {
		q.Authorization = p.authorization()
	}
	q.Consumed, q.Delegation = p.consumedDelegation()
	p.lit(`,"execution":`)
	q.Execution = p.execution()
	q.Facts, q.Issuer, q.Policy, q.Principal, q.ReceiptID, q.Request = p.middle(&q.Model)
	p.lit(`,"session":{"id":`)
	q.Session.ID = p.optStr()
	p.lit(`,"provenance":`)
	q.Session.Provenance = Provenance(p.str())
	p.lit(`,"toolUseId":`)
	q.Session.ToolUseID = p.optStr()
	p.lit(`}`)
	q.Timestamp, q.Tool = p.trailing()
	if p.bad || p.i != len(raw) {
		return nil, false
	}
	if !writesBack(raw, func(out []byte) ([]byte, bool) {
		out, ok, err := appendCanonicalPredicate(out, &q, predicateArgs{}, nil)
		return out, ok && err == nil
	}) {
		return nil, false
	}
	return &q, true
}

// decodeCanonicalAuthorization reads an authorization predicate in canonical form.
func decodeCanonicalAuthorization(raw []byte) (*AuthorizationPredicate, bool) {
	p := predicateParser{fileFormParser{data: raw}}
	var q AuthorizationPredicate
	p.lit(`{"agent":`)
	q.Agent = p.agent()
	q.Consumed, q.Delegation = p.consumedDelegation()
	q.Facts, q.Issuer, q.Policy, q.Principal, q.ReceiptID, q.Request = p.middle(nil)
	q.Timestamp, q.Tool = p.trailing()
	if p.bad || p.i != len(raw) {
		return nil, false
	}
	if !writesBack(raw, func(out []byte) ([]byte, bool) {
		out, ok, err := appendCanonicalAuthorization(out, &q, predicateArgs{})
		return out, ok && err == nil
	}) {
		return nil, false
	}
	return &q, true
}

// predicateParser reads the members of the predicates; like fileFormParser it sets
// bad at the first byte it does not expect and reads nothing after.
type predicateParser struct{ fileFormParser }

// consumedDelegation reads the optional members between authorization and execution.
func (p *predicateParser) consumedDelegation() (c *Consumed, d *Delegation) {
	if p.try(`,"consumed":{"factIds":`) {
		c = &Consumed{FactIDs: p.strs()}
		c.Provenance = p.endProvenance()
	}
	if p.try(`,"delegation":{"envelope":`) {
		d = &Delegation{Envelope: p.envelope()}
		d.Provenance = p.endProvenance()
	}
	return c, d
}

// middle reads the members both predicates share from facts to request, and a
// receipt predicate's model (into model, when not nil) in between.
func (p *predicateParser) middle(model *Model) (facts map[string]Fact, is IssuerInfo, pol *Policy, pr Principal, id string, r Request) {
	p.lit(`,"facts":`)
	facts = p.facts()
	p.lit(`,"issuer":{`)
	if p.try(`"framework":`) {
		is.Framework = p.str()
		p.lit(`,`)
	}
	p.lit(`"keyid":`)
	is.KeyID = p.str()
	p.lit(`,"kind":`)
	is.Kind = p.str()
	p.lit(`,"version":`)
	is.Version = p.str()
	p.lit(`}`)
	if model != nil { // a receipt predicate's
		p.lit(`,"model":{"id":`)
		model.ID = p.optStr()
		model.Provenance = p.endProvenance()
	}
	pol = p.policy()
	p.lit(`,"principal":{"id":`)
	pr.ID = p.optStr()
	if p.try(`,"keyid":`) {
		pr.KeyID = p.str()
	}
	pr.Provenance = p.endProvenance()
	p.lit(`,"receiptId":`)
	id = p.str()
	p.lit(`,"request":{"args":`)
	r.Args = p.raw()
	p.lit(`,"argsDigest":`)
	r.ArgsDigest = p.str()
	r.Provenance = p.endProvenance()
	return facts, is, pol, pr, id, r
}

// policy reads the policy member.
func (p *predicateParser) policy() *Policy {
	p.lit(`,"policy":`)
	if p.try(`null`) {
		return nil
	}
	var pol Policy
	p.lit(`{"decision":`)
	pol.Decision = p.str()
	p.lit(`,"errors":`)
	pol.Errors = p.strs()
	p.lit(`,"policyDigest":`)
	pol.PolicyDigest = p.str()
	p.lit(`,"provenance":`)
	pol.Provenance = Provenance(p.str())
	p.lit(`,"reasons":`)
	pol.Reasons = p.strs()
	p.lit(`}`)
	return &pol
}

// trailing reads timestamp and tool, and the predicate's closing brace.
func (p *predicateParser) trailing() (ts string, t Tool) {
	p.lit(`,"timestamp":`)
	ts = p.str()
	p.lit(`,"tool":{`)
	if p.try(`"definitionDigest":`) {
		t.DefinitionDigest = p.str()
		p.lit(`,`)
	}
	if p.try(`"definitionLeafIndex":`) {
		n := p.uint()
		t.DefinitionLeafIndex = &n
		p.lit(`,`)
	}
	p.lit(`"name":`)
	t.Name = p.str()
	p.lit(`,"provenance":`)
	t.Provenance = Provenance(p.str())
	if p.try(`,"upstream":`) {
		t.Upstream = p.str()
	}
	p.lit(`}}`)
	return ts, t
}

func (p *predicateParser) agent() (a Agent) {
	p.lit(`{"id":`)
	a.ID = p.str()
	a.Provenance = p.endProvenance()
	return a
}

func (p *predicateParser) authorization() *Authorization {
	var a Authorization
	p.lit(`{"envelope":`)
	a.Envelope = p.envelope()
	p.lit(`,"inclusion":{"hashes":`)
	a.Inclusion.Hashes = p.strs()
	p.lit(`,"leafIndex":`)
	a.Inclusion.LeafIndex = p.uint()
	p.lit(`,"treeSize":`)
	a.Inclusion.TreeSize = p.uint()
	p.lit(`},"treeHead":`)
	a.TreeHead = p.envelope()
	p.lit(`}`)
	return &a
}

func (p *predicateParser) execution() (e Execution) {
	p.lit(`{`)
	if p.try(`"error":`) {
		e.Error = p.str()
		p.lit(`,`)
	}
	p.lit(`"provenance":`)
	e.Provenance = Provenance(p.str())
	if p.try(`,"reason":`) {
		e.Reason = p.str()
	}
	if p.try(`,"result":`) {
		e.Result = p.raw()
	}
	if p.try(`,"resultDigest":`) {
		e.ResultDigest = p.str()
	}
	p.lit(`,"status":`)
	e.Status = p.str()
	if p.try(`,"upstream":`) {
		e.Upstream = p.raw()
	}
	p.lit(`}`)
	return e
}

func (p *predicateParser) facts() map[string]Fact {
	if p.try(`null`) {
		return nil
	}
	p.lit(`{`)
	facts := map[string]Fact{}
	if p.try(`}`) {
		return facts
	}
	for !p.bad {
		name := p.str()
		var f Fact
		p.lit(`:{"args":`)
		f.Args = p.raw()
		p.lit(`,"provenance":`)
		f.Provenance = Provenance(p.str())
		p.lit(`,"resultDigest":`)
		f.ResultDigest = p.str()
		p.lit(`,"tool":`)
		f.Tool = p.str()
		p.lit(`,"value":`)
		f.Value = p.raw()
		p.lit(`}`)
		facts[name] = f
		if !p.try(`,`) {
			break
		}
	}
	p.lit(`}`)
	return facts
}

// envelope reads a DSSE envelope in canonical form, or null.
func (p *predicateParser) envelope() *Envelope {
	if p.try(`null`) {
		return nil
	}
	var e Envelope
	p.lit(`{"payload":`)
	e.Payload = p.b64()
	p.lit(`,"payloadType":`)
	e.PayloadType = p.str()
	p.lit(`,"signatures":`)
	switch {
	case p.try(`null`):
	case p.try(`[]`):
		e.Signatures = []Signature{}
	default:
		p.lit(`[`)
		for !p.bad {
			var s Signature
			p.lit(`{"keyid":`)
			s.KeyID = p.str()
			p.lit(`,"sig":`)
			s.Sig = p.b64()
			p.lit(`}`)
			e.Signatures = append(e.Signatures, s)
			if !p.try(`,`) {
				break
			}
		}
		p.lit(`]`)
	}
	p.lit(`}`)
	return &e
}

// endProvenance reads the last member of most records and the record's end.
func (p *predicateParser) endProvenance() Provenance {
	p.lit(`,"provenance":`)
	v := Provenance(p.str())
	p.lit(`}`)
	return v
}

// optStr reads a string or null (nil).
func (p *predicateParser) optStr() *string {
	if p.try(`null`) {
		return nil
	}
	s := p.str()
	return &s
}

// strs reads an array of strings, or null (nil).
func (p *predicateParser) strs() []string {
	switch {
	case p.try(`null`):
		return nil
	case p.try(`[]`):
		return []string{}
	}
	p.lit(`[`)
	var out []string
	for !p.bad {
		out = append(out, p.str())
		if !p.try(`,`) {
			break
		}
	}
	p.lit(`]`)
	return out
}

// raw reads one JSON value as it stands, by its brackets and strings only: the
// write-back canonicalizes it, which refuses what is not JSON. The result shares the
// predicate's bytes, with its capacity cut so an append cannot reach them.
func (p *predicateParser) raw() json.RawMessage {
	if p.bad {
		return nil
	}
	d, start, depth := p.data, p.i, 0
	for i := p.i; i < len(d); i++ {
		switch c := d[i]; c {
		case '"':
			for i++; i < len(d) && d[i] != '"'; i++ {
				if d[i] == '\\' {
					i++
				}
			}
			if i >= len(d) {
				p.bad = true
				return nil
			}
		case '{', '[':
			depth++
		case '}', ']', ',':
			if depth == 0 {
				if i == start {
					p.bad = true
					return nil
				}
				p.i = i
				return json.RawMessage(d[start:i:i])
			}
			if c != ',' {
				depth--
			}
		}
	}
	p.bad = true
	return nil
}
