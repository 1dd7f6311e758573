package vectorgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"svc.dev/svc/conformance"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// corpusCall is one tool call of the corpus and how it is tampered with, if at all.
type corpusCall struct {
	n         int
	issuer    string // key name: gateway, gateway-2 or sdk
	id, ts    string
	agent     string
	grant     *receipt.Envelope
	tool      string
	args      string
	decision  string
	status    string
	precommit bool
	auth      *receipt.Authorization
	cause     *corpusCause
}

// corpusCause is a typical way a receipt goes wrong (SPEC.md, Verifier and tools),
// planted in a call: before signing (mutate, key), after the proof (post), or in the
// file written (file).
type corpusCause struct {
	name, check string
	sdk         bool // an SDK call
	precommit   bool // a pre-committed gateway call
	forked      bool // logged in a fork of the log
	key         string
	mutate      func(g *corpusGen, c *corpusCall, p *receipt.Predicate)
	post        func(g *corpusGen, c *corpusCall, b *receipt.Bundle)
	file        func(g *corpusGen, c *corpusCall, b *receipt.Bundle) ([]byte, error)
}

var corpusCauses = []*corpusCause{
	{name: "edited receipt", check: conformance.CheckReceiptSignature, post: func(_ *corpusGen, _ *corpusCall, b *receipt.Bundle) {
		b.Envelope.Payload = []byte(strings.Replace(string(b.Envelope.Payload), `example-model-1`, `example-model-2`, 1))
	}},
	{name: "untrusted issuer key", check: conformance.CheckReceiptSignature, key: "rogue", mutate: func(g *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Issuer.KeyID = g.keys["rogue"].KeyID()
	}},
	{name: "truncated file", check: conformance.CheckReceiptSignature, file: func(_ *corpusGen, _ *corpusCall, b *receipt.Bundle) ([]byte, error) {
		data, err := marshalBundle(b)
		return data[:len(data)/2], err
	}},
	{name: "wrong file", check: conformance.CheckPayloadType, precommit: true, file: func(_ *corpusGen, c *corpusCall, _ *receipt.Bundle) ([]byte, error) {
		return marshalBundle(&receipt.Bundle{Envelope: c.auth.Envelope, TreeHead: c.auth.TreeHead, Inclusion: c.auth.Inclusion})
	}},
	{name: "issuer keyid of another gateway", check: conformance.CheckIssuerKeyID, mutate: func(g *corpusGen, c *corpusCall, p *receipt.Predicate) {
		other := "gateway-2"
		if c.issuer == other {
			other = "gateway"
		}
		p.Issuer.KeyID = g.keys[other].KeyID()
	}},
	{name: "SDK receipt relabelled as gateway", check: conformance.CheckCarriesDelegation, sdk: true, mutate: func(_ *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Issuer.Kind = receipt.KindGateway
		p.Issuer.Framework = ""
	}},
	{name: "grant signed by an untrusted principal", check: conformance.CheckDelegationSignature, mutate: func(g *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Delegation.Envelope = g.stranger
	}},
	{name: "a sub-agent given more than its delegator", check: conformance.CheckDelegationChain, mutate: func(g *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Delegation.Envelope, p.Agent.ID, p.Tool.Name = g.greedy, "agent-x", "delete_repo"
	}},
	{name: "grant expired", check: conformance.CheckDelegationValid, mutate: func(_ *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Timestamp = receipt.FormatTime(grantIssuedAt.Add(grantTTL + time.Hour))
	}},
	{name: "tool outside the delegated scope", check: conformance.CheckToolInScope, mutate: func(_ *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Tool.Name = "drop_database"
		p.Execution.Status = receipt.StatusExecuted
	}},
	{name: "args edited after digest", check: conformance.CheckArgsDigest, mutate: func(_ *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Request.Args = raw(`{"amount":990000,"to":"acct-666"}`)
	}},
	{name: "an issuer that executed after a deny", check: conformance.CheckPolicyConsistent, mutate: func(_ *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Policy.Decision, p.Policy.Reasons = receipt.Deny, []string{"over-limit"}
		p.Execution = receipt.Execution{Status: receipt.StatusExecuted, Result: toolResult("done", false), Provenance: receipt.Observed}
		p.Execution.ResultDigest, _ = receipt.ResultDigest(p.Execution.Result)
	}},
	{name: "an allow beside policy errors", check: conformance.CheckNoPolicyErrors, mutate: func(_ *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Policy.Errors = []string{"type error"}
	}},
	{name: "an authorization spliced from another call", check: conformance.CheckAuthNamesCall, precommit: true, mutate: func(g *corpusGen, _ *corpusCall, p *receipt.Predicate) {
		p.Authorization = g.lastAuth
	}},
	{name: "evidence written after the side effect", check: conformance.CheckAuthBeforeExecution, precommit: true, mutate: func(g *corpusGen, c *corpusCall, p *receipt.Predicate) {
		p.Authorization = g.lateAuth(c)
	}},
	{name: "tree head signed by an untrusted key", check: conformance.CheckTreeHeadSignature, post: func(g *corpusGen, _ *corpusCall, b *receipt.Bundle) {
		b.TreeHead = receipt.Sign(b.TreeHead.PayloadType, b.TreeHead.Payload, g.keys["rogue"])
	}},
	{name: "inclusion proof for another leaf", check: conformance.CheckInclusion, post: func(_ *corpusGen, _ *corpusCall, b *receipt.Bundle) {
		if b.Inclusion.LeafIndex > 0 {
			b.Inclusion.LeafIndex--
		} else {
			b.Inclusion.LeafIndex++
		}
	}},
	{name: "history rewritten (a fork of the log)", check: conformance.CheckWitnessCovers, forked: true},
}

func marshalBundle(b *receipt.Bundle) ([]byte, error) {
	data, err := json.MarshalIndent(b, "", "  ")
	return append(data, '\n'), err
}

// call n of the corpus: who issues it, under which grant, and its outcome.
func (g *corpusGen) call(n int) *corpusCall {
	c := &corpusCall{n: n, ts: receipt.FormatTime(vectorEpoch.Add(time.Duration(n) * g.step)), decision: receipt.Allow, status: receipt.StatusExecuted}
	switch n % 5 {
	case 0, 1:
		c.issuer = "gateway"
	case 2, 3:
		c.issuer = "gateway-2"
	default:
		c.issuer = "sdk"
	}
	c.id = fmt.Sprintf("%08x-0000-4000-8000-%012d", n%5, n)
	switch (n / 5) % 4 {
	case 0, 1:
		c.agent, c.grant, c.tool, c.args = "agent-a", g.grantA, "transfer", fmt.Sprintf(`{"amount":%d,"currency":"EUR","to":"acct-%d"}`, 100+n%900, n%97)
	case 2:
		c.agent, c.grant, c.tool, c.args = "agent-b", g.grantB, "lookup", fmt.Sprintf(`{"customer":"c-%d"}`, n%1000)
	default:
		c.agent, c.grant, c.tool, c.args = "agent-c", g.grantC, "search", fmt.Sprintf(`{"query":"invoice %d","amount":%d}`, n, n%50)
	}
	switch n % 23 {
	case 7:
		c.decision, c.status = receipt.Deny, receipt.StatusDenied
	case 11:
		c.status = receipt.StatusFailed
	case 13:
		c.status = receipt.StatusError
	}
	c.precommit = c.issuer != "sdk" && c.status == receipt.StatusExecuted && n%20 == 0
	return c
}

// plan picks which calls carry a tampered cause: Copies of each, spread evenly.
func (g *corpusGen) plan(c *corpusCall, next *int) {
	total := len(corpusCauses) * g.opts.Copies
	if *next >= total || g.opts.Receipts < 2*total {
		return
	}
	stride := g.opts.Receipts / total
	if c.n%stride != stride/2 {
		return
	}
	cause := corpusCauses[*next%len(corpusCauses)]
	*next++
	c.cause = cause
	switch {
	case cause.sdk:
		c.issuer, c.precommit = "sdk", false
	case cause.precommit:
		c.issuer, c.precommit, c.status, c.decision = "gateway", true, receipt.StatusExecuted, receipt.Allow
	default:
		if c.issuer == "sdk" {
			c.issuer = "gateway"
		}
		c.precommit, c.status, c.decision = false, receipt.StatusExecuted, receipt.Allow
	}
}

func (g *corpusGen) run() error {
	next := 0
	for n := 0; n < g.opts.Receipts; n++ {
		c := g.call(n)
		g.plan(c, &next)
		if c.cause != nil && c.cause.precommit && c.cause.check == conformance.CheckAuthNamesCall && g.lastAuth == nil {
			c.cause = nil // nothing to splice yet
		}
		if c.precommit {
			if err := g.authorize(c); err != nil {
				return err
			}
		} else if err := g.finish(c); err != nil {
			return err
		}
		if err := g.flushReady(); err != nil {
			return err
		}
	}
	for len(g.pending) > 0 || len(g.ready) > 0 {
		if err := g.seal(); err != nil {
			return err
		}
		if err := g.flushReady(); err != nil {
			return err
		}
	}
	return nil
}

func (g *corpusGen) flushReady() error {
	ready := g.ready
	g.ready = nil
	for _, c := range ready {
		if err := g.finish(c); err != nil {
			return err
		}
	}
	return nil
}

func (g *corpusGen) issuerInfo(c *corpusCall) receipt.IssuerInfo {
	in := receipt.IssuerInfo{Kind: receipt.KindGateway, KeyID: g.keys[c.issuer].KeyID(), Version: receipt.Version}
	if c.issuer == "sdk" {
		in.Kind, in.Framework = receipt.KindSDK, "corpus-agent"
	}
	return in
}

// predicate is the receipt predicate of c, before its cause.
func (g *corpusGen) predicate(c *corpusCall) *receipt.Predicate {
	argsDigest := mustDigest(c.args)
	p := &receipt.Predicate{
		ReceiptID: c.id, Timestamp: c.ts, Issuer: g.issuerInfo(c),
		Session: receipt.Session{ID: strp(fmt.Sprintf("session-%d", c.n/50)), Provenance: receipt.Claimed},
		Model:   receipt.Model{ID: strp("example-model-1"), Provenance: receipt.Claimed},
		Request: receipt.Request{Args: raw(c.args), ArgsDigest: argsDigest, Provenance: receipt.Claimed},
		Facts:   map[string]receipt.Fact{},
	}
	if c.issuer == "sdk" {
		p.Principal = receipt.Principal{ID: strp("alice"), Provenance: receipt.Claimed}
		p.Agent = receipt.Agent{ID: "support-bot", Provenance: receipt.Claimed}
		p.Tool = receipt.Tool{Name: c.tool, Provenance: receipt.Claimed}
	} else {
		p.Principal = receipt.Principal{ID: strp("alice"), KeyID: g.keys["alice"].KeyID(), Provenance: receipt.Attested}
		p.Agent = receipt.Agent{ID: c.agent, Provenance: receipt.Attested}
		p.Delegation = &receipt.Delegation{Envelope: c.grant, Provenance: receipt.Attested}
		p.Tool = receipt.Tool{Name: c.tool, Provenance: receipt.Observed}
		p.Policy = &receipt.Policy{Decision: c.decision, Reasons: []string{"allow-fleet"}, Errors: []string{}, PolicyDigest: policyDigest(), Provenance: receipt.Observed}
		if c.decision == receipt.Deny {
			p.Policy.Reasons = []string{"over-limit"}
		}
	}
	prov := receipt.Observed
	if c.issuer == "sdk" {
		prov = receipt.Claimed
	}
	switch c.status {
	case receipt.StatusExecuted, receipt.StatusFailed:
		p.Execution = receipt.Execution{Status: c.status, Result: toolResult("ok "+c.id[len(c.id)-6:], c.status == receipt.StatusFailed), Provenance: prov}
		p.Execution.ResultDigest, _ = receipt.ResultDigest(p.Execution.Result)
	case receipt.StatusDenied:
		p.Execution = receipt.Execution{Status: c.status, Reason: "policy denied the call", Provenance: prov}
	default:
		p.Execution = receipt.Execution{Status: c.status, Error: "upstream unreachable", Provenance: prov}
	}
	p.Authorization = c.auth
	return p
}

// authorize signs and logs c's authorization; c is finished once a head covers it.
func (g *corpusGen) authorize(c *corpusCall) error {
	p := g.predicate(c)
	ap := receipt.AuthorizationPredicate{ReceiptID: p.ReceiptID, Timestamp: p.Timestamp, Issuer: p.Issuer, Principal: p.Principal,
		Agent: p.Agent, Delegation: p.Delegation, Tool: p.Tool, Request: p.Request, Facts: p.Facts, Policy: p.Policy}
	env, err := g.sign(c.issuer, c.tool, c.id, p.Request.ArgsDigest, receipt.PredicateAuthorization, ap)
	if err != nil {
		return err
	}
	return g.add(env.Canonical(), func(inc receipt.Inclusion, head *receipt.Envelope) error {
		c.auth = &receipt.Authorization{Envelope: env, TreeHead: head, Inclusion: inc}
		g.ready = append(g.ready, c)
		path := filepath.Join(g.dir, "receipts", c.issuer, c.id+".authorization.json")
		return g.writeBundle(path, &receipt.Bundle{Envelope: env, TreeHead: head, Inclusion: inc})
	})
}

func (g *corpusGen) sign(key, tool, id, argsDigest, predicateType string, pred any) (*receipt.Envelope, error) {
	st, err := receipt.NewStatement(tool, id, argsDigest, predicateType, pred)
	if err != nil {
		return nil, err
	}
	payload, err := st.Canonical()
	if err != nil {
		return nil, err
	}
	return receipt.Sign(receipt.PayloadInToto, payload, g.keys[key]), nil
}

// finish signs c's receipt, logs it and writes its bundle once a head covers it.
func (g *corpusGen) finish(c *corpusCall) error {
	p := g.predicate(c)
	if c.auth != nil && (c.cause == nil || c.cause.check != conformance.CheckAuthNamesCall) {
		defer func(a *receipt.Authorization) { g.lastAuth = a }(c.auth)
	}
	key := c.issuer
	if c.cause != nil {
		if c.cause.mutate != nil {
			c.cause.mutate(g, c, p)
		}
		if c.cause.key != "" {
			key = c.cause.key
		}
	}
	env, err := g.sign(key, p.Tool.Name, p.ReceiptID, p.Request.ArgsDigest, receipt.PredicateReceipt, p)
	if err != nil {
		return err
	}
	path := filepath.Join(g.dir, "receipts", c.issuer, c.id+".json")
	g.out.Receipts++
	done := func(inc receipt.Inclusion, head *receipt.Envelope) error {
		b := &receipt.Bundle{Envelope: env, TreeHead: head, Inclusion: inc}
		if c.cause == nil {
			return g.writeBundle(path, b)
		}
		g.out.Causes[path] = c.cause.name
		if c.cause.forked {
			g.out.Forked = append(g.out.Forked, path)
		} else {
			g.out.Tampered[path] = c.cause.check
		}
		if c.cause.post != nil {
			c.cause.post(g, c, b)
		}
		if c.cause.file == nil {
			return g.writeBundle(path, b)
		}
		data, err := c.cause.file(g, c, b)
		if err != nil {
			return err
		}
		return os.WriteFile(path, data, 0o644)
	}
	if c.cause != nil && c.cause.forked {
		return g.fork(env.Canonical(), done)
	}
	return g.add(env.Canonical(), done)
}

// sideTree is a log of the same key that holds pad other leaves and then leaf: a fork of
// the hosted log (the same key signed two histories), or a second log the issuer used.
func (g *corpusGen) sideTree(pad uint64, leaf []byte) (receipt.Inclusion, *receipt.Envelope, error) {
	t, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		return receipt.Inclusion{}, nil, err
	}
	for i := uint64(0); i < pad; i++ {
		if _, err := t.Append(merkle.LeafHash(fmt.Appendf(nil, `"fork %d"`, i))); err != nil {
			return receipt.Inclusion{}, nil, err
		}
	}
	idx, err := t.Append(merkle.LeafHash(leaf))
	if err != nil {
		return receipt.Inclusion{}, nil, err
	}
	size := t.Size()
	hs, err := t.InclusionProof(idx, size)
	if err != nil {
		return receipt.Inclusion{}, nil, err
	}
	head, err := receipt.SignTreeHead(g.keys["log"], size, t.Root().String(), g.now(), corpusLogID)
	return receipt.Inclusion{LeafIndex: idx, TreeSize: size, Hashes: receipt.HashStrings(hs)}, head, err
}

// fork logs leaf in a fork of the hosted log as large as the log is now.
func (g *corpusGen) fork(leaf []byte, done func(receipt.Inclusion, *receipt.Envelope) error) error {
	inc, head, err := g.sideTree(g.tree.Size(), leaf)
	if err != nil {
		return err
	}
	return done(inc, head)
}

// lateAuth re-logs c's authorization in a second log far past where c's receipt will
// land: evidence written after the side effect.
func (g *corpusGen) lateAuth(c *corpusCall) *receipt.Authorization {
	inc, head, err := g.sideTree(g.tree.Size()+uint64(g.opts.HeadEvery)+8, c.auth.Envelope.Canonical())
	if err != nil {
		panic(err)
	}
	return &receipt.Authorization{Envelope: c.auth.Envelope, TreeHead: head, Inclusion: inc}
}
