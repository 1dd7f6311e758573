package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Check names, exactly as SPEC.md's verification table writes them, in order.
const (
	CheckReceiptSignature    = "receipt signature (issuer key)"
	CheckPayloadType         = "receipt payload type"
	CheckIssuerKind          = "issuer kind is known"
	CheckIssuerKeyID         = "issuer keyid matches signer"
	CheckCarriesDelegation   = "gateway receipt carries a delegation"
	CheckCarriesPolicy       = "gateway receipt carries a policy decision"
	CheckDelegationSignature = "delegation signature (principal key)"
	CheckDelegationChain     = "delegation chain to the principal"
	CheckDelegationBinds     = "delegation binds principal and agent"
	CheckDelegationValid     = "delegation valid at receipt time"
	CheckToolInScope         = "executed tool within delegated scope"
	CheckPrincipalClaimed    = "principal is claimed, not attested"
	CheckArgsDigest          = "request args digest"
	CheckUpstreamKey         = "upstream signature (upstream key)"
	CheckProviderSecret      = "upstream signature (provider secret)"
	CheckPolicyConsistent    = "policy decision consistent with execution"
	CheckNoPolicyErrors      = "no policy errors on an allow"
	CheckAuthSignature       = "authorization signature (issuer key)"
	CheckAuthNamesCall       = "authorization names this call"
	CheckAuthTreeHead        = "authorization tree head signature"
	CheckAuthInclusion       = "authorization log inclusion proof"
	CheckAuthBeforeExecution = "authorization logged before execution"
	CheckTreeHeadSignature   = "tree head signature"
	CheckTreeHeadLog         = "tree head names the expected log"
	CheckTreeHeadSize        = "tree head matches inclusion proof size"
	CheckInclusion           = "log inclusion proof"
	CheckLogFileRoot         = "log file root matches tree head"
	// The tool-definition checks run only on a gateway receipt whose tool carries a
	// definitionDigest (an optional field added after v0.2 shipped).
	CheckToolDefinitionLogged = "tool definition logged"
	CheckToolDefinitionBefore = "tool definition logged before the call"
	// CheckWitnessCovers runs only with witness keys (verify --witness-key or
	// --witness-url): SPEC.md's verify takes those flags but its table names no check
	// for them, so this one follows audit's wording.
	CheckWitnessCovers = "tree head countersigned by a witness"
)

// LogCopy is a copy of the log a verifier holds (a log file, or a log server's /root
// route): it answers the root at a size.
type LogCopy interface {
	// Size is the number of leaves the copy holds.
	Size() (uint64, error)
	// RootAt is the root of the first size leaves; size ≤ Size().
	RootAt(size uint64) (merkle.Hash, error)
	// Describe names the copy in reports ("log file x.log", "log server https://...").
	Describe() string
}

// Options are the verifier's inputs besides the bundle: public keys and secrets only.
type Options struct {
	IssuerKeys    []signer.PublicKey // trusted issuer (gateway or SDK) keys; rotation: several
	PrincipalKeys []signer.PublicKey // trusted principal keys, for gateway receipts
	LogKeys       []signer.PublicKey // trusted log keys, for heads signed by a remote log
	UpstreamKeys  []signer.PublicKey // keys of upstreams that sign their results
	LogID         string             // when set, the head's `log` must equal it
	Log           LogCopy            // optional copy of the log
	// WitnessKeys, when set, require the receipt's head to be covered by a witness:
	// countersigned itself, or consistent with WitnessHead, a checkpoint the witness
	// countersigned (proved by WitnessProof from the head's size to the checkpoint's).
	WitnessKeys []signer.PublicKey
	WitnessHead *receipt.Envelope
	WitnessLog  ConsistencySource
	// Cosigned, when set, requires the receipt's head to be consistent with a C2SP
	// checkpoint its caller already verified under a witness policy (svc verify
	// --checkpoint <note> --policy <file>): its size and root, with what vouches for
	// it in Cosigned.By. Proofs come from WitnessLog.
	Cosigned *CosignedCheckpoint
	// ProviderSecrets maps a provider kind (receipt.ProviderPaymentWebhook,
	// receipt.ProviderRepoDelivery) to its shared secret.
	ProviderSecrets map[string][]byte
	// ToolDefinitions are tool-definitions statements (their bundle files, as a
	// gateway writes them beside its receipts) that a receipt citing a tool definition
	// is checked against.
	ToolDefinitions []*receipt.Bundle

	// cache, set by a Batch, remembers the checks bundles share (grants, heads, the
	// witness checkpoint); nil verifies everything afresh.
	cache *verifyCache
}

// verification carries what earlier checks learned to later ones.
type verification struct {
	opts       Options
	b          *receipt.Bundle
	r          *Report
	signerKey  signer.PublicKey // the issuer key that verified the receipt, if any
	pred       *receipt.Predicate
	stmt       *receipt.Statement
	chain      *receipt.Chain
	rootKey    signer.PublicKey // principal key that signed the chain's root
	attestedBy string           // upstream keyid or "shared secret" once an attestation verified
}

// VerifyBytes parses a bundle and verifies it. A bundle that does not parse fails the
// first check, with the parse error as detail.
func VerifyBytes(data []byte, opts Options) *Report {
	b, err := receipt.ParseBundle(data)
	if err != nil {
		r := &Report{}
		r.add(CheckReceiptSignature, false, "bundle does not parse: %v", err)
		r.finish()
		return r
	}
	return Verify(b, opts)
}

// Verify runs every check of SPEC.md's verification table that applies to b.
func Verify(b *receipt.Bundle, opts Options) *Report {
	v := &verification{opts: opts, b: b, r: &Report{}}
	v.run()
	v.r.finish()
	return v.r
}

func (v *verification) run() {
	r := v.r
	// receipt signature (issuer key)
	if k, err := v.b.Envelope.Verify(v.opts.IssuerKeys); err != nil {
		r.add(CheckReceiptSignature, false, "%v (signature keyids %s; %d trusted issuer keys)", err, sigKeyIDs(v.b.Envelope), len(v.opts.IssuerKeys))
	} else {
		v.signerKey = k
		r.add(CheckReceiptSignature, true, "signed by %s", k.KeyID)
	}
	// receipt payload type
	if !v.payloadType() {
		return // nothing below can be read
	}
	p := v.pred
	r.ReceiptID = p.ReceiptID
	// issuer kind is known
	if !r.add(CheckIssuerKind, p.Issuer.Kind == receipt.KindGateway || p.Issuer.Kind == receipt.KindSDK, "kind %q", p.Issuer.Kind) {
		return
	}
	// issuer keyid matches signer
	signing := v.signerKey.KeyID
	if signing == "" && len(v.b.Envelope.Signatures) > 0 {
		signing = v.b.Envelope.Signatures[0].KeyID
	}
	r.add(CheckIssuerKeyID, p.Issuer.KeyID == signing, "issuer.keyid %s, signed by %s", short(p.Issuer.KeyID), short(signing))

	if p.Issuer.Kind == receipt.KindGateway {
		v.delegationChecks()
	} else {
		v.sdkPrincipal()
	}
	v.argsDigest()
	v.upstream()
	v.policy()
	if p.Authorization != nil {
		v.authorization()
	}
	if p.Tool.DefinitionDigest != "" && p.Issuer.Kind == receipt.KindGateway {
		v.toolDefinition()
	}
	v.treeHead()
	if !r.brief {
		v.describe()
	}
}

func (v *verification) payloadType() bool {
	env := v.b.Envelope
	if env.PayloadType != receipt.PayloadInToto {
		return v.r.add(CheckPayloadType, false, "payloadType %q, want %q", env.PayloadType, receipt.PayloadInToto)
	}
	if st, pred, err := receipt.DecodeReceipt(env); err == nil && st.Type == receipt.StatementType && st.PredicateType == receipt.PredicateReceipt {
		v.stmt, v.pred = st, pred
		return v.r.add(CheckPayloadType, true, "%s", receipt.PredicateReceipt)
	}
	// Read again step by step, for the first failure's own detail.
	st, err := receipt.DecodeStatement(env)
	if err != nil {
		return v.r.add(CheckPayloadType, false, "%v", err)
	}
	if st.Type != receipt.StatementType {
		return v.r.add(CheckPayloadType, false, "_type %q, want %q", st.Type, receipt.StatementType)
	}
	if st.PredicateType != receipt.PredicateReceipt {
		return v.r.add(CheckPayloadType, false, "predicateType %q, want %q", st.PredicateType, receipt.PredicateReceipt)
	}
	pred, err := st.DecodePredicate()
	if err != nil {
		return v.r.add(CheckPayloadType, false, "%v", err)
	}
	v.stmt, v.pred = st, pred
	return v.r.add(CheckPayloadType, true, "%s", receipt.PredicateReceipt)
}

func (v *verification) delegationChecks() {
	r, p := v.r, v.pred
	d := p.Delegation
	hasDelegation := d != nil && d.Envelope != nil
	r.add(CheckCarriesDelegation, hasDelegation && d.Provenance == receipt.Attested, "%s", presence(hasDelegation, "delegation"))
	r.add(CheckCarriesPolicy, p.Policy != nil, "%s", presence(p.Policy != nil, "policy decision"))

	var chainErr error
	var g *grantResult
	if hasDelegation {
		g = v.opts.cache.grant(d.Envelope, v.opts.PrincipalKeys)
		v.chain, chainErr = g.chain, g.chainErr
	}
	// delegation signature (principal key)
	switch {
	case !hasDelegation:
		r.add(CheckDelegationSignature, false, "no delegation to check")
	case chainErr != nil:
		r.add(CheckDelegationSignature, false, "%v", chainErr)
	default:
		k, err := g.rootKey, g.rootErr
		if r.add(CheckDelegationSignature, err == nil, "%s", errOr(err, "signed by principal key "+k.KeyID)) {
			v.rootKey = k
		}
	}
	if v.chain == nil {
		for _, name := range []string{CheckDelegationBinds, CheckDelegationValid, CheckToolInScope} {
			r.add(name, false, "no readable delegation")
		}
		return
	}
	c := v.chain
	// delegation chain to the principal (only when the grant embeds a parent)
	if c.Depth() > 1 {
		err := g.linksErr
		r.add(CheckDelegationChain, err == nil, "%s", errOr(err, fmt.Sprintf("%d links from principal %q to agent %q", c.Depth(), c.Root().Principal, c.Leaf().Agent)))
	}
	// delegation binds principal and agent
	leaf := c.Leaf()
	var problems []string
	if p.Principal.ID == nil || *p.Principal.ID != leaf.Principal {
		problems = append(problems, fmt.Sprintf("receipt principal %s, grant principal %q", strPtr(p.Principal.ID), leaf.Principal))
	}
	if p.Agent.ID != leaf.Agent {
		problems = append(problems, fmt.Sprintf("receipt agent %q, grant agent %q", p.Agent.ID, leaf.Agent))
	}
	if p.Principal.KeyID != v.rootKey.KeyID || v.rootKey.KeyID == "" {
		problems = append(problems, fmt.Sprintf("receipt principal keyid %s, grant signed by %s", short(p.Principal.KeyID), short(v.rootKey.KeyID)))
	}
	if p.Principal.Provenance != receipt.Attested || p.Agent.Provenance != receipt.Attested {
		problems = append(problems, "principal and agent must be attested on a gateway receipt")
	}
	r.add(CheckDelegationBinds, len(problems) == 0, "%s", joinOr(problems, fmt.Sprintf("principal %q, agent %q", leaf.Principal, leaf.Agent)))
	// delegation valid at receipt time
	at, err := receipt.ParseTime(p.Timestamp)
	if err == nil {
		for _, g := range c.Grants {
			if err = g.ValidAt(at); err != nil {
				break
			}
		}
	}
	r.add(CheckDelegationValid, err == nil, "%s", errOr(err, fmt.Sprintf("%s within %s..%s", p.Timestamp, leaf.IssuedAt, leaf.ExpiresAt)))
	// executed tool within delegated scope
	if p.Execution.Status == receipt.StatusDenied {
		r.add(CheckToolInScope, true, "denied call; the tool never ran")
	} else {
		r.add(CheckToolInScope, leaf.HasScope(p.Tool.Name), "tool %q, scopes %v", p.Tool.Name, leaf.Scopes)
	}
}

func (v *verification) sdkPrincipal() {
	p := v.pred
	var problems []string
	if p.Principal.Provenance != receipt.Claimed {
		problems = append(problems, fmt.Sprintf("principal provenance %q", p.Principal.Provenance))
	}
	if p.Principal.KeyID != "" {
		problems = append(problems, "principal names a keyid")
	}
	if p.Delegation != nil {
		problems = append(problems, "an SDK receipt carries a delegation")
	}
	if p.Agent.Provenance != receipt.Claimed {
		problems = append(problems, fmt.Sprintf("agent provenance %q", p.Agent.Provenance))
	}
	v.r.add(CheckPrincipalClaimed, len(problems) == 0, "%s", joinOr(problems, "principal and agent are claimed by the agent's process"))
}

func (v *verification) argsDigest() {
	p := v.pred
	d, err := receipt.DigestJSON(p.Request.Args)
	if err != nil {
		v.r.add(CheckArgsDigest, false, "request.args: %v", err)
		return
	}
	sd, err := v.stmt.SubjectDigest()
	var problems []string
	if err != nil {
		problems = append(problems, err.Error())
	}
	if d != p.Request.ArgsDigest {
		problems = append(problems, fmt.Sprintf("digest of args %s, argsDigest %s", short(d), short(p.Request.ArgsDigest)))
	}
	if sd != p.Request.ArgsDigest {
		problems = append(problems, fmt.Sprintf("subject digest %s, argsDigest %s", short(sd), short(p.Request.ArgsDigest)))
	}
	if len(v.stmt.Subject) == 1 && v.stmt.Subject[0].Name != receipt.SubjectName(p.Tool.Name, p.ReceiptID) {
		problems = append(problems, fmt.Sprintf("subject name %q, want %q", v.stmt.Subject[0].Name, receipt.SubjectName(p.Tool.Name, p.ReceiptID)))
	}
	v.r.add(CheckArgsDigest, len(problems) == 0, "%s", joinOr(problems, "sha256 "+d))
}

func (v *verification) policy() {
	p := v.pred
	if p.Policy == nil {
		return // skipped: no policy was evaluated
	}
	st, dec := p.Execution.Status, p.Policy.Decision
	var ok bool
	switch dec {
	case receipt.Allow:
		ok = st != receipt.StatusDenied
	case receipt.Deny:
		ok = st == receipt.StatusDenied
	}
	if st == receipt.StatusWithheld && dec != receipt.Allow {
		ok = false
	}
	v.r.add(CheckPolicyConsistent, ok, "decision %q, execution %q", dec, st)
	if dec == receipt.Allow {
		v.r.add(CheckNoPolicyErrors, len(p.Policy.Errors) == 0, "%d evaluation errors", len(p.Policy.Errors))
	} else {
		v.r.add(CheckNoPolicyErrors, true, "decision is %q", dec)
	}
}

func (v *verification) authorization() {
	r, a := v.r, v.pred.Authorization
	if a.Envelope == nil || a.TreeHead == nil {
		for _, n := range []string{CheckAuthSignature, CheckAuthNamesCall, CheckAuthTreeHead, CheckAuthInclusion, CheckAuthBeforeExecution} {
			r.add(n, false, "authorization is incomplete")
		}
		return
	}
	// authorization signature (issuer key): the same key as the receipt's
	k, err := a.Envelope.Verify(v.opts.IssuerKeys)
	same := err == nil && (v.signerKey.KeyID == "" || k.KeyID == v.signerKey.KeyID)
	if err == nil && !same {
		err = fmt.Errorf("signed by %s, the receipt by %s", short(k.KeyID), short(v.signerKey.KeyID))
	}
	r.add(CheckAuthSignature, same, "%s", errOr(err, "signed by "+k.KeyID))
	// authorization names this call
	r.add(CheckAuthNamesCall, v.authNamesCall(a.Envelope) == "", "%s", orDefault(v.authNamesCall(a.Envelope), "receipt id, tool, args digest, agent and principal match; decision allow"))
	// authorization tree head signature
	th, who, err := v.verifyHead(a.TreeHead)
	r.add(CheckAuthTreeHead, err == nil, "%s", errOr(err, "signed by "+who))
	// authorization log inclusion proof
	if th == nil {
		r.add(CheckAuthInclusion, false, "tree head unreadable")
	} else {
		err := inclusion(a.Envelope, a.Inclusion, th)
		r.add(CheckAuthInclusion, err == nil, "%s", errOr(err, fmt.Sprintf("leaf %d of %d", a.Inclusion.LeafIndex, a.Inclusion.TreeSize)))
	}
	// authorization logged before execution
	ri := v.b.Inclusion
	before := a.Inclusion.LeafIndex < ri.LeafIndex && a.Inclusion.TreeSize <= ri.TreeSize
	r.add(CheckAuthBeforeExecution, before, "authorization leaf %d (tree size %d), receipt leaf %d (tree size %d)", a.Inclusion.LeafIndex, a.Inclusion.TreeSize, ri.LeafIndex, ri.TreeSize)
}

// authNamesCall returns "" when the authorization statement names this call, else why not.
func (v *verification) authNamesCall(env *receipt.Envelope) string {
	p := v.pred
	st, err := receipt.DecodeStatement(env)
	if err != nil {
		return err.Error()
	}
	if st.Type != receipt.StatementType || st.PredicateType != receipt.PredicateAuthorization {
		return fmt.Sprintf("predicateType %q, want %q", st.PredicateType, receipt.PredicateAuthorization)
	}
	ap, err := st.DecodeAuthorization()
	if err != nil {
		return err.Error()
	}
	sd, _ := st.SubjectDigest()
	var problems []string
	if ap.ReceiptID != p.ReceiptID {
		problems = append(problems, fmt.Sprintf("receipt id %q, want %q", ap.ReceiptID, p.ReceiptID))
	}
	if ap.Tool.Name != p.Tool.Name {
		problems = append(problems, fmt.Sprintf("tool %q, want %q", ap.Tool.Name, p.Tool.Name))
	}
	if ap.Request.ArgsDigest != p.Request.ArgsDigest || sd != p.Request.ArgsDigest {
		problems = append(problems, "arguments digest differs")
	}
	if ap.Agent.ID != p.Agent.ID {
		problems = append(problems, fmt.Sprintf("agent %q, want %q", ap.Agent.ID, p.Agent.ID))
	}
	if strPtr(ap.Principal.ID) != strPtr(p.Principal.ID) {
		problems = append(problems, fmt.Sprintf("principal %s, want %s", strPtr(ap.Principal.ID), strPtr(p.Principal.ID)))
	}
	if ap.Policy == nil || ap.Policy.Decision != receipt.Allow {
		problems = append(problems, "did not record an allow")
	}
	return strings.Join(problems, "; ")
}

func (v *verification) treeHead() {
	r, b := v.r, v.b
	th, who, err := v.verifyHead(b.TreeHead)
	r.add(CheckTreeHeadSignature, err == nil, "%s", errOr(err, "signed by "+who))
	if th == nil {
		for _, n := range []string{CheckTreeHeadLog, CheckTreeHeadSize, CheckInclusion} {
			r.add(n, false, "tree head unreadable")
		}
		return
	}
	if v.opts.LogID != "" {
		r.add(CheckTreeHeadLog, th.Log == v.opts.LogID, "head names log %q, expected %q", th.Log, v.opts.LogID)
	} else {
		r.add(CheckTreeHeadLog, true, "no expected log id given; head names log %q", th.Log)
	}
	r.add(CheckTreeHeadSize, th.TreeSize == b.Inclusion.TreeSize, "head size %d, proof size %d", th.TreeSize, b.Inclusion.TreeSize)
	err = inclusion(b.Envelope, b.Inclusion, th)
	r.add(CheckInclusion, err == nil, "%s", errOr(err, fmt.Sprintf("leaf %d of %d under root %s", b.Inclusion.LeafIndex, th.TreeSize, short(th.RootHash))))
	if v.opts.Log != nil {
		r.add(CheckLogFileRoot, v.logCopyRoot(th) == "", "%s", orDefault(v.logCopyRoot(th), fmt.Sprintf("%s has root %s at size %d", v.opts.Log.Describe(), short(th.RootHash), th.TreeSize)))
	}
	if len(v.opts.WitnessKeys) > 0 || v.opts.Cosigned != nil {
		what, err := v.witnessCovers(th)
		r.add(CheckWitnessCovers, err == nil, "%s", errOr(err, what))
	}
}

// CosignedCheckpoint is a C2SP checkpoint verified under a witness policy.
type CosignedCheckpoint struct {
	TreeSize uint64
	RootHash string // lowercase hex
	By       string // who cosigned it, for the report ("witnesses W1, W2 under policy p")
}

// cosignedCovers reports how a policy-verified C2SP checkpoint covers th.
func (v *verification) cosignedCovers(th *receipt.TreeHead) (string, error) {
	c := v.opts.Cosigned
	if c.TreeSize < th.TreeSize {
		return "", fmt.Errorf("the cosigned checkpoint is at size %d; the head is at %d (try again after the next checkpoint)", c.TreeSize, th.TreeSize)
	}
	w := &receipt.TreeHead{TreeSize: c.TreeSize, RootHash: c.RootHash}
	if err := v.opts.cache.extends(th, w, v.opts.WitnessLog); err != nil {
		return "", err
	}
	return fmt.Sprintf("consistent with the C2SP checkpoint at size %d cosigned by %s", c.TreeSize, c.By), nil
}

// witnessCovers reports how a witness vouches for the receipt's head.
func (v *verification) witnessCovers(th *receipt.TreeHead) (string, error) {
	if ks := v.b.TreeHead.VerifiedBy(v.opts.WitnessKeys); len(ks) > 0 {
		return "the head itself is countersigned by witness key " + short(ks[0].KeyID), nil
	}
	if v.opts.Cosigned != nil {
		return v.cosignedCovers(th)
	}
	if v.opts.WitnessHead == nil {
		return "", errors.New("the head carries no witness signature and no witness checkpoint was given")
	}
	k, w, err := v.opts.cache.witnessHead(v.opts.WitnessHead, v.opts.WitnessKeys)
	if err != nil {
		return "", fmt.Errorf("witness checkpoint: %w", err)
	}
	if w.TreeSize < th.TreeSize {
		return "", fmt.Errorf("the witness has countersigned only up to size %d; the head is at %d (try again after the next checkpoint)", w.TreeSize, th.TreeSize)
	}
	if err := v.opts.cache.extends(th, w, v.opts.WitnessLog); err != nil {
		return "", err
	}
	return fmt.Sprintf("consistent with the checkpoint at size %d countersigned by witness key %s", w.TreeSize, short(k.KeyID)), nil
}

func (v *verification) logCopyRoot(th *receipt.TreeHead) string {
	lc := v.opts.Log
	n, err := lc.Size()
	if err != nil {
		return err.Error()
	}
	if n < th.TreeSize {
		return fmt.Sprintf("%s holds %d leaves; the head is at size %d", lc.Describe(), n, th.TreeSize)
	}
	root, err := lc.RootAt(th.TreeSize)
	if err != nil {
		return err.Error()
	}
	if root.String() != th.RootHash {
		return fmt.Sprintf("%s has root %s at size %d; the head says %s", lc.Describe(), short(root.String()), th.TreeSize, short(th.RootHash))
	}
	return ""
}

// verifyHead checks a head's signature, trusting log keys first and then issuer keys.
// It returns the decoded head even when the signature fails, so later checks can run.
func (v *verification) verifyHead(env *receipt.Envelope) (*receipt.TreeHead, string, error) {
	return v.opts.cache.head(env, v.checkHead)
}

func (v *verification) checkHead(env *receipt.Envelope) (*receipt.TreeHead, string, error) {
	th, err := receipt.DecodeTreeHead(env)
	if err != nil {
		return nil, "", err
	}
	if k, err := env.Verify(v.opts.LogKeys); err == nil {
		return th, "log key " + k.KeyID, nil
	}
	if k, err := env.Verify(v.opts.IssuerKeys); err == nil {
		return th, "issuer key " + k.KeyID, nil
	}
	return th, "", fmt.Errorf("%w (signature keyids %s; %d log and %d issuer keys trusted)", receipt.ErrNoTrustedSignature, sigKeyIDs(env), len(v.opts.LogKeys), len(v.opts.IssuerKeys))
}

func inclusion(env *receipt.Envelope, inc receipt.Inclusion, th *receipt.TreeHead) error {
	root, err := merkle.ParseHash(th.RootHash)
	if err != nil {
		return fmt.Errorf("rootHash: %w", err)
	}
	proof, err := receipt.ParseHashes(inc.Hashes)
	if err != nil {
		return err
	}
	if inc.TreeSize != th.TreeSize {
		return fmt.Errorf("proof is for size %d, head is at %d", inc.TreeSize, th.TreeSize)
	}
	leaf := env.LeafHash()
	if err := merkle.VerifyInclusion(inc.LeafIndex, inc.TreeSize, leaf, proof, root); err != nil {
		return fmt.Errorf("leaf %d of %d: %w", inc.LeafIndex, inc.TreeSize, err)
	}
	return nil
}

// describe fills the ISSUER summary and the table of fields with their provenance.
func (v *verification) describe() {
	p, r := v.pred, v.r
	is := &Issuer{Kind: p.Issuer.Kind, KeyID: p.Issuer.KeyID}
	if p.Issuer.Kind == receipt.KindGateway {
		is.Enforced = true
		is.Summary = "gateway (enforced outside the agent's process)"
	} else {
		is.Summary = "sdk (self-reported by the agent's own process; nothing was enforced)"
		if p.Issuer.Framework != "" {
			is.Summary = fmt.Sprintf("sdk in %s (self-reported by the agent's own process; nothing was enforced)", p.Issuer.Framework)
		}
	}
	r.Issuer = is
	add := func(field, value string, prov receipt.Provenance) {
		r.Fields = append(r.Fields, Field{Field: field, Value: value, Provenance: string(prov)})
	}
	principal := strPtr(p.Principal.ID)
	if p.Principal.KeyID != "" {
		principal += " (key " + short(p.Principal.KeyID) + ")"
	}
	add("principal", principal, p.Principal.Provenance)
	add("agent", p.Agent.ID, p.Agent.Provenance)
	if v.chain != nil && v.chain.Depth() > 1 {
		var agents []string
		for _, g := range v.chain.Grants {
			agents = append(agents, g.Agent)
		}
		add("delegation", fmt.Sprintf("chain %s → %s", v.chain.Root().Principal, strings.Join(agents, " → ")), receipt.Attested)
	} else if v.chain != nil {
		add("delegation", fmt.Sprintf("scopes %v until %s", v.chain.Leaf().Scopes, v.chain.Leaf().ExpiresAt), receipt.Attested)
	}
	tool := p.Tool.Name
	if p.Tool.Upstream != "" {
		tool += " via " + p.Tool.Upstream
	}
	add("tool", tool, p.Tool.Provenance)
	add("request.args", "sha256 "+short(p.Request.ArgsDigest), p.Request.Provenance)
	add("session", strPtr(p.Session.ID), p.Session.Provenance)
	add("model", strPtr(p.Model.ID), p.Model.Provenance)
	names := make([]string, 0, len(p.Facts))
	for n := range p.Facts {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		add("facts."+n, compact(p.Facts[n].Value), p.Facts[n].Provenance)
	}
	if p.Consumed != nil {
		add("consumed", strings.Join(p.Consumed.FactIDs, ", "), p.Consumed.Provenance)
	}
	if p.Policy != nil {
		add("policy", fmt.Sprintf("%s %v", p.Policy.Decision, p.Policy.Reasons), p.Policy.Provenance)
	} else {
		add("policy", "none evaluated", "")
	}
	add("execution", executionSummary(p.Execution), receipt.Provenance(v.executionProvenance()))
	if p.Authorization != nil {
		add("authorization", fmt.Sprintf("logged at leaf %d before the call", p.Authorization.Inclusion.LeafIndex), "")
	}
	r.Notes = append(r.Notes, "a verified receipt does not prove that the upstream's real side effect happened (unless attested), that the arguments were correct, that the named model produced the call, or that the operator is honest")
}

func executionSummary(e receipt.Execution) string {
	switch e.Status {
	case receipt.StatusExecuted, receipt.StatusFailed:
		return fmt.Sprintf("%s, result sha256 %s", e.Status, short(e.ResultDigest))
	case receipt.StatusError:
		return "error: " + e.Error
	default:
		return e.Status + ": " + e.Reason
	}
}

func presence(ok bool, what string) string {
	if ok {
		return what + " present"
	}
	return what + " missing"
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func orDefault(problem, ok string) string {
	if problem != "" {
		return problem
	}
	return ok
}

func joinOr(problems []string, ok string) string {
	if len(problems) > 0 {
		return strings.Join(problems, "; ")
	}
	return ok
}

func strPtr(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}

func short(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	if id == "" {
		return "(none)"
	}
	return id
}

func sigKeyIDs(env *receipt.Envelope) string {
	ids := make([]string, len(env.Signatures))
	for i, s := range env.Signatures {
		ids[i] = short(s.KeyID)
	}
	return "[" + strings.Join(ids, " ") + "]"
}

func compact(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}
