package vectorgen

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
)

// Key sets the cases are verified with.
var (
	gatewayInputs = conformance.CaseInputs{IssuerKeys: []string{"gateway"}, PrincipalKeys: []string{"alice"}, Log: "logs/gateway.log"}
	sdkInputs     = conformance.CaseInputs{IssuerKeys: []string{"sdk"}, Log: "logs/sdk.log"}
)

func with(in conformance.CaseInputs, f func(*conformance.CaseInputs)) conformance.CaseInputs {
	f(&in)
	return in
}

// valid holds the issuers and logs of the generated vectors and the valid receipts the
// tampered cases start from.
type valid struct {
	gw, sdk       *receipt.Issuer
	gwLog, sdkLog *receipt.FileLog
	call          receipt.Call // the allowed transfer with a fact lookup
	executed      *receipt.Bundle
	precommit     *receipt.Bundle
	precommitP    *receipt.Pending
	attested      *receipt.Bundle
	payment       *receipt.Bundle
	remote        *receipt.Bundle
	remoteInputs  conformance.CaseInputs
	sdkOK         *receipt.Bundle
}

const transferArgs = `{"amount":1250,"currency":"EUR","to":"acct-42"}`

// okTransfer is the upstream's answer to the allowed transfer.
func okTransfer(*receipt.Pending) receipt.Execution {
	return executed(toolResult("transferred 12.50 EUR to acct-42", false), receipt.Observed)
}

// cases generates every vector, in a fixed order (each receipt takes the next leaf of
// its log, so the order is part of the vectors).
func (g *gen) cases() error {
	v, err := g.issuers()
	if err != nil {
		return err
	}
	for _, step := range []func(*valid) error{g.gatewayCases, g.precommitCases, g.chainCases, g.attestedCases, g.remoteCase, g.sdkCases, g.tampered, g.toolDefinitionCases} {
		if err := step(v); err != nil {
			return err
		}
	}
	return nil
}

// issuers opens the gateway's and the SDK's logs and issuers and signs alice's grant.
func (g *gen) issuers() (*valid, error) {
	v := &valid{}
	var err error
	if v.gwLog, err = g.log("gateway", "gateway", ""); err != nil {
		return nil, err
	}
	if v.sdkLog, err = g.log("sdk", "sdk", ""); err != nil {
		return nil, err
	}
	if v.gw, err = g.issuer(receipt.KindGateway, "gateway", v.gwLog); err != nil {
		return nil, err
	}
	if v.sdk, err = g.issuer(receipt.KindSDK, "sdk", v.sdkLog); err != nil {
		return nil, err
	}
	scopes := []string{"transfer", "read_balance", "search", "deploy"}
	g.grant = g.signGrant("alice", "alice", "agent-a", scopes, grantIssuedAt, grantTTL, "agent-a", nil)
	return v, nil
}

// gatewayCases: valid gateway receipts, one per execution status and kind of deny.
func (g *gen) gatewayCases(v *valid) error {
	gw, ok := v.gw, okTransfer
	call := g.gatewayCall(g.grant, "agent-a", "transfer", transferArgs, receipt.Allow, "allow-small-transfers")
	call.Facts = map[string]receipt.Fact{"balance": {Tool: "read_balance", Args: raw(`{"account":"acct-1"}`), Value: raw(`50000`), ResultDigest: mustDigest(`50000`), Provenance: receipt.Observed}}
	executedB, _, err := issue(gw, call, false, ok)
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-executed", "a gateway receipt for an allowed, executed call with a fact lookup, checked against a copy of the log", "", executedB, gatewayInputs, ""); err != nil {
		return err
	}
	failedB, _, err := issue(gw, call, false, func(*receipt.Pending) receipt.Execution {
		return receipt.Execution{Status: receipt.StatusFailed, Result: toolResult("insufficient funds", true), Provenance: receipt.Observed}
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-failed", "the upstream answered isError: true", "", failedB, gatewayInputs, ""); err != nil {
		return err
	}
	denyCall := g.gatewayCall(g.grant, "agent-a", "transfer", `{"amount":5000000,"currency":"EUR","to":"acct-666"}`, receipt.Deny)
	deniedB, _, err := issue(gw, denyCall, false, func(*receipt.Pending) receipt.Execution {
		return receipt.Execution{Status: receipt.StatusDenied, Reason: "Denied by policy: no permit matched", Provenance: receipt.Observed}
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-denied-policy", "the policy denied the call; nothing went upstream", "", deniedB, gatewayInputs, ""); err != nil {
		return err
	}
	scopeCall := g.gatewayCall(g.grant, "agent-a", "delete_repo", `{"repo":"acme/app"}`, receipt.Deny, "outside delegated scope")
	scopeB, _, err := issue(gw, scopeCall, false, func(*receipt.Pending) receipt.Execution {
		return receipt.Execution{Status: receipt.StatusDenied, Reason: "tool delete_repo is outside the grant's scopes", Provenance: receipt.Observed}
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-denied-scope", "a tool outside the grant's scopes was denied", "", scopeB, gatewayInputs, ""); err != nil {
		return err
	}
	floatCall := g.gatewayCall(g.grant, "agent-a", "transfer", `{"amount":12.5,"currency":"EUR","to":"acct-42"}`, receipt.Deny)
	floatCall.Policy.Errors = []string{"allow-small-transfers: context.args.amount is a floating point number, which the policy language does not have"}
	floatB, _, err := issue(gw, floatCall, false, func(*receipt.Pending) receipt.Execution {
		return receipt.Execution{Status: receipt.StatusDenied, Reason: "Denied by policy: evaluation error", Provenance: receipt.Observed}
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-denied-evaluation-error", "a float in touched args is an evaluation error and therefore a deny, recorded with the error", "", floatB, gatewayInputs, ""); err != nil {
		return err
	}
	errorB, _, err := issue(gw, call, false, func(*receipt.Pending) receipt.Execution {
		return receipt.Execution{Status: receipt.StatusError, Error: "connect: connection refused", Provenance: receipt.Observed}
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-error", "the upstream could not be reached", "", errorB, gatewayInputs, ""); err != nil {
		return err
	}
	v.call, v.executed = call, executedB
	return nil
}

// precommitCases: a pre-committed call, and one withheld because the log refused its
// authorization.
func (g *gen) precommitCases(v *valid) error {
	gw, gwLog := v.gw, v.gwLog
	precommitB, precommitP, err := issue(gw, g.gatewayCall(g.grant, "agent-a", "deploy", `{"service":"web","version":"1.4.2"}`, receipt.Allow, "allow-deploys"), true, func(*receipt.Pending) receipt.Execution {
		return executed(toolResult("deployed web 1.4.2", false), receipt.Observed)
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-precommit-executed", "a pre-committed call: the authorization was logged before the call was forwarded", "", precommitB, gatewayInputs, ""); err != nil {
		return err
	}
	flaky := &refuseNext{Log: gwLog, refuse: true}
	gwFlaky, err := g.issuer(receipt.KindGateway, "gateway", flaky)
	if err != nil {
		return err
	}
	withheldB, _, err := issue(gwFlaky, g.gatewayCall(g.grant, "agent-a", "deploy", `{"service":"web","version":"1.4.3"}`, receipt.Allow, "allow-deploys"), true, nil)
	if err == nil || withheldB != nil {
		return errorf("withheld case: the refusing log took the authorization")
	}
	// The authorization was refused: the call is withheld and the receipt says so.
	withheldP, err := gw.Begin(g.gatewayCall(g.grant, "agent-a", "deploy", `{"service":"web","version":"1.4.3"}`, receipt.Allow, "allow-deploys"))
	if err != nil {
		return err
	}
	withheldB, err = gw.Finish(context.Background(), withheldP, receipt.Execution{Status: receipt.StatusWithheld, Reason: "Not executed: the log did not commit the authorization (503 log unavailable)", Provenance: receipt.Observed})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-withheld", "a pre-committed tool whose authorization the log refused: policy allow beside withheld", "", withheldB, gatewayInputs, ""); err != nil {
		return err
	}

	v.precommit, v.precommitP = precommitB, precommitP
	return nil
}

// chainCases: sub-agents under grants delegated once and twice, and consumed facts.
func (g *gen) chainCases(v *valid) error {
	gw := v.gw
	// Chained grants: alice → agent-a → agent-b → agent-c.
	chain2 := g.signGrant("agent-a", "alice", "agent-b", []string{"search", "transfer"}, grantIssuedAt.Add(time.Hour), 7*24*time.Hour, "agent-b", g.grant)
	chain3 := g.signGrant("agent-b", "alice", "agent-c", []string{"search"}, grantIssuedAt.Add(2*time.Hour), 24*time.Hour, "agent-c", chain2)
	chain2B, _, err := issue(gw, g.gatewayCall(chain2, "agent-b", "search", `{"q":"invoices 2025"}`, receipt.Allow, "allow-search"), false, func(*receipt.Pending) receipt.Execution {
		return executed(toolResult("3 results", false), receipt.Observed)
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-chain-depth-2", "a sub-agent acting under a grant delegated once", "", chain2B, gatewayInputs, ""); err != nil {
		return err
	}
	chain3B, _, err := issue(gw, g.gatewayCall(chain3, "agent-c", "search", `{"q":"open invoices"}`, receipt.Allow, "allow-search"), true, func(*receipt.Pending) receipt.Execution {
		return executed(toolResult("1 result", false), receipt.Observed)
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-chain-depth-3-precommit", "the deepest chain allowed (three grants), on a pre-committed call", "", chain3B, gatewayInputs, ""); err != nil {
		return err
	}
	consumed := g.gatewayCall(g.grant, "agent-a", "search", `{"q":"refund policy"}`, receipt.Allow, "allow-search")
	consumed.Consumed = &receipt.Consumed{FactIDs: []string{"kb:article-17", "kb:article-22"}, Provenance: receipt.Observed}
	consumedB, _, err := issue(gw, consumed, false, func(*receipt.Pending) receipt.Execution {
		return executed(toolResult("refunds within 30 days", false), receipt.Observed)
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-consumed-facts", "a receipt carrying fact ids upstreams declared on earlier calls", "", consumedB, gatewayInputs, ""); err != nil {
		return err
	}

	return nil
}

// attestedCases: an upstream's signature over its result, and provider deliveries.
func (g *gen) attestedCases(v *valid) error {
	gw, call := v.gw, v.call
	// Upstream attestation and provider deliveries.
	attResult := toolResult("transferred 12.50 EUR to acct-42", false)
	attB, _, err := issue(gw, call, false, func(p *receipt.Pending) receipt.Execution {
		e := executed(attResult, receipt.Observed)
		d, _ := conformance.ContentDigest(attResult)
		env, _ := receipt.SignJSON(receipt.PayloadUpstream, receipt.UpstreamAttestation{ReceiptID: p.ReceiptID, Tool: "transfer", ContentDigest: d}, g.keys["upstream"])
		e.Upstream = mustJSON(env)
		return e
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-upstream-attested", "the upstream signed its result; checked with its key", "", attB, with(gatewayInputs, func(i *conformance.CaseInputs) { i.UpstreamKeys = []string{"upstream"} }), ""); err != nil {
		return err
	}
	if err := g.addVerify("gateway-upstream-not-checked", "the same receipt without the upstream key: it verifies and the report says the signature was not checked", "", attB, gatewayInputs, ""); err != nil {
		return err
	}
	payB, _, err := issue(gw, call, false, func(p *receipt.Pending) receipt.Execution {
		at, _ := receipt.ParseTime(p.Timestamp)
		e := executed(toolResult("payment pi_3QconfA succeeded", false), receipt.Observed)
		e.Upstream = mustJSON(paymentDelivery(vectorSecrets[receipt.ProviderPaymentWebhook], at.Add(-30*time.Second), "pi_3QconfA"))
		return e
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-payment-webhook", "a payment-webhook delivery bound to the result, checked with the shared secret", "", payB, with(gatewayInputs, func(i *conformance.CaseInputs) { i.Secrets = []string{receipt.ProviderPaymentWebhook} }), ""); err != nil {
		return err
	}
	if err := g.addVerify("gateway-payment-webhook-not-checked", "the same delivery without the secret: carried and not checked", "", payB, gatewayInputs, ""); err != nil {
		return err
	}
	repoB, _, err := issue(gw, g.gatewayCall(g.grant, "agent-a", "deploy", `{"service":"web","version":"1.5.0"}`, receipt.Allow, "allow-deploys"), false, func(*receipt.Pending) receipt.Execution {
		e := executed(mustJSON(map[string]any{"content": []any{map[string]any{"type": "text", "text": "pushed 9f2c1e7d"}}, "structuredContent": map[string]any{"commit": "9f2c1e7d0b5a4e3f2a1b0c9d8e7f6a5b4c3d2e1f"}}), receipt.Observed)
		e.Upstream = mustJSON(repoDelivery(vectorSecrets[receipt.ProviderRepoDelivery], "9f2c1e7d0b5a4e3f2a1b0c9d8e7f6a5b4c3d2e1f"))
		return e
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("gateway-repo-delivery", "a repo-delivery webhook bound to the result, checked with the shared secret", "", repoB, with(gatewayInputs, func(i *conformance.CaseInputs) { i.Secrets = []string{receipt.ProviderRepoDelivery} }), ""); err != nil {
		return err
	}

	v.attested, v.payment = attB, payB
	return nil
}

// remoteCase: a receipt whose head a remote log signed.
func (g *gen) remoteCase(v *valid) error {
	call, ok := v.call, okTransfer
	remote, err := g.log("remote", "log", "acme-prod")
	if err != nil {
		return err
	}
	gwRemote, err := g.issuer(receipt.KindGateway, "gateway", remote)
	if err != nil {
		return err
	}
	remoteB, _, err := issue(gwRemote, call, false, ok)
	if err != nil {
		return err
	}
	remoteInputs := conformance.CaseInputs{IssuerKeys: []string{"gateway"}, PrincipalKeys: []string{"alice"}, LogKeys: []string{"log"}, LogID: "acme-prod", Log: "logs/remote.log"}
	if err := g.addVerify("gateway-remote-log", "the head was signed by a log the issuer does not run, naming its log id", "", remoteB, remoteInputs, ""); err != nil {
		return err
	}

	v.remote, v.remoteInputs = remoteB, remoteInputs
	return nil
}

// sdkCases: SDK receipts, self-reported by the agent's process.
func (g *gen) sdkCases(v *valid) error {
	sdk := v.sdk
	sdkPolicy := &receipt.Policy{Decision: receipt.Allow, Reasons: []string{"allow-lookups"}, Errors: []string{}, PolicyDigest: policyDigest(), Provenance: receipt.Claimed}
	sdkOK, _, err := issue(sdk, sdkCall("lookup_order", `{"order":"A-1001"}`, sdkPolicy), false, func(*receipt.Pending) receipt.Execution {
		return receipt.Execution{Status: receipt.StatusExecuted, Result: raw(`{"status":"shipped"}`), Provenance: receipt.Claimed}
	})
	if err != nil {
		return err
	}
	if err := g.addVerify("sdk-executed", "an SDK receipt: self-reported by the agent's process", "", sdkOK, sdkInputs, ""); err != nil {
		return err
	}
	for _, v := range []struct {
		name, desc string
		exec       receipt.Execution
		pol        *receipt.Policy
	}{
		{"sdk-failed", "the tool reported failure", receipt.Execution{Status: receipt.StatusFailed, Result: raw(`{"error":"not found"}`), Provenance: receipt.Claimed}, sdkPolicy},
		{"sdk-denied", "the host's policy said no", receipt.Execution{Status: receipt.StatusDenied, Reason: "refunds need a human", Provenance: receipt.Claimed},
			&receipt.Policy{Decision: receipt.Deny, Reasons: []string{}, Errors: []string{}, PolicyDigest: policyDigest(), Provenance: receipt.Claimed}},
		{"sdk-error", "the tool threw", receipt.Execution{Status: receipt.StatusError, Error: "timeout after 30s", Provenance: receipt.Claimed}, sdkPolicy},
		{"sdk-no-policy", "no policy was evaluated (policy is null)", receipt.Execution{Status: receipt.StatusExecuted, Result: raw(`"ok"`), Provenance: receipt.Claimed}, nil},
	} {
		b, _, err := issue(sdk, sdkCall("refund_order", `{"order":"A-1001","amount":4999}`, v.pol), false, func(*receipt.Pending) receipt.Execution { return v.exec })
		if err != nil {
			return err
		}
		if err := g.addVerify(v.name, v.desc, "", b, sdkInputs, ""); err != nil {
			return err
		}
	}
	v.sdkOK = sdkOK
	return nil
}

func mustDigest(js string) string {
	d, err := receipt.DigestJSON([]byte(js))
	if err != nil {
		panic(err)
	}
	return d
}

type genError string

func (e genError) Error() string { return string(e) }

func errorf(s string) error { return genError(s) }

// tampered writes one vector per typical cause of failure, and one per check.
// tcase is a vector that must fail verification, at the check fail.
type tcase struct {
	name, cause, desc string
	b                 *receipt.Bundle
	in                conformance.CaseInputs
	fail              string
}

// tcases collects the failing vectors; they are written after everything the builders
// write on the way.
type tcases []tcase

func (cs *tcases) add(name, cause, desc string, b *receipt.Bundle, in conformance.CaseInputs, fail string) {
	*cs = append(*cs, tcase{name, cause, desc, b, in, fail})
}

// mustReissue re-signs b's statement, edited by f, with key and logs it in log.
func (g *gen) mustReissue(b *receipt.Bundle, key string, log receipt.Log, f func(*receipt.Predicate)) *receipt.Bundle {
	out, err := g.reissue(b, key, log, f)
	if err != nil {
		panic(err)
	}
	return out
}

// tampered generates the vectors that must fail: SPEC's typical causes, then one per
// remaining check, then the audit-trail cases.
func (g *gen) tampered(v *valid) error {
	var cs tcases
	if err := g.tamperedTypical(v, &cs); err != nil {
		return err
	}
	if err := g.tamperedPerCheck(v, &cs); err != nil {
		return err
	}
	for _, c := range cs {
		if err := g.addVerify(c.name, c.desc, c.cause, c.b, c.in, c.fail); err != nil {
			return err
		}
	}
	return g.audits(v.gw, v.gwLog, v.executed)
}

// tamperedTypical: the typical causes of SPEC.md, "Verifier and tools".
func (g *gen) tamperedTypical(v *valid, cs *tcases) error {
	gw, gwLog, sdkLog := v.gw, v.gwLog, v.sdkLog
	executedB, sdkOK, precommitB, precommitP := v.executed, v.sdkOK, v.precommit, v.precommitP
	edited := cloneBundle(executedB)
	edited.Envelope.Payload = []byte(strings.Replace(string(edited.Envelope.Payload), `"amount":1250`, `"amount":9250`, 1))
	cs.add("tampered-edited-receipt", "edited receipt", "the statement was edited after signing (amount 1250 → 9250)", edited, gatewayInputs, conformance.CheckReceiptSignature)
	cs.add("tampered-untrusted-issuer", "untrusted issuer key", "a well-formed receipt signed by a key the verifier does not trust",
		g.mustReissue(executedB, "rogue", gwLog, func(p *receipt.Predicate) { p.Issuer.KeyID = g.keys["rogue"].KeyID() }), gatewayInputs, conformance.CheckReceiptSignature)
	authFile := &receipt.Bundle{Envelope: precommitB.Envelope, TreeHead: precommitB.TreeHead, Inclusion: precommitB.Inclusion}
	if a := precommitP.Authorization(); a != nil {
		authFile = &receipt.Bundle{Envelope: a.Envelope, TreeHead: a.TreeHead, Inclusion: a.Inclusion}
	}
	cs.add("tampered-wrong-file", "wrong file", "an authorization file given where a receipt was expected", authFile, gatewayInputs, conformance.CheckPayloadType)
	cs.add("tampered-sdk-relabelled-as-gateway", "SDK receipt relabelled as gateway", "an SDK issuer re-signed its receipt claiming kind gateway; it has no delegation",
		g.mustReissue(sdkOK, "sdk", sdkLog, func(p *receipt.Predicate) { p.Issuer.Kind = receipt.KindGateway }), with(sdkInputs, func(i *conformance.CaseInputs) { i.PrincipalKeys = []string{"alice"} }), conformance.CheckCarriesDelegation)
	greedy := g.signGrant("agent-a", "alice", "agent-b", []string{"search", "transfer", "delete_repo"}, grantIssuedAt.Add(time.Hour), 24*time.Hour, "", g.grant)
	greedyB, _, err := issue(gw, g.gatewayCall(greedy, "agent-b", "delete_repo", `{"repo":"acme/app"}`, receipt.Allow, "allow-all"), false, func(*receipt.Pending) receipt.Execution {
		return executed(toolResult("deleted", false), receipt.Observed)
	})
	if err != nil {
		return err
	}
	cs.add("tampered-sub-agent-exceeds-delegator", "a sub-agent given more than its delegator", "agent-a delegated delete_repo, which its own grant does not hold", greedyB, gatewayInputs, conformance.CheckDelegationChain)
	cs.add("tampered-executed-after-deny", "an issuer that executed after a deny", "the policy said deny and the issuer forwarded the call anyway",
		g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Policy.Decision = receipt.Deny; p.Policy.Reasons = []string{} }), gatewayInputs, conformance.CheckPolicyConsistent)
	other, _, err := issue(gw, g.gatewayCall(g.grant, "agent-a", "deploy", `{"service":"db","version":"9.9.9"}`, receipt.Allow, "allow-deploys"), true, func(*receipt.Pending) receipt.Execution {
		return executed(toolResult("deployed db 9.9.9", false), receipt.Observed)
	})
	if err != nil {
		return err
	}
	otherAuth := mustPredicate(other).Authorization
	cs.add("tampered-spliced-authorization", "an authorization spliced from another call", "the embedded authorization was logged for a different call",
		g.mustReissue(precommitB, "gateway", gwLog, func(p *receipt.Predicate) { p.Authorization = otherAuth }), gatewayInputs, conformance.CheckAuthNamesCall)
	late, err := g.lateAuthorization(gw, gwLog)
	if err != nil {
		return err
	}
	cs.add("tampered-authorization-after-execution", "evidence written after the side effect", "the authorization's leaf comes after the receipt's: it was logged after the call ran", late, with(gatewayInputs, func(i *conformance.CaseInputs) { i.Log = "logs/gateway-late.log" }), conformance.CheckAuthBeforeExecution)
	diverged, err := g.divergedLog("logs/gateway.log", "logs/gateway-diverged.log")
	if err != nil {
		return err
	}
	cs.add("tampered-diverging-log-copy", "a log copy that diverges", "the bundle is sound but the verifier's copy of the log differs from what the head committed to",
		executedB, with(gatewayInputs, func(i *conformance.CaseInputs) { i.Log = diverged }), conformance.CheckLogFileRoot)

	return nil
}

// tamperedPerCheck: one vector per remaining check.
func (g *gen) tamperedPerCheck(v *valid, cs *tcases) error {
	gwLog, sdkLog := v.gwLog, v.sdkLog
	executedB, sdkOK, precommitB, remoteB, remoteInputs, attB, payB := v.executed, v.sdkOK, v.precommit, v.remote, v.remoteInputs, v.attested, v.payment
	cs.add("tampered-issuer-keyid", "", "issuer.keyid names a key other than the signer's", g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Issuer.KeyID = g.keys["alice"].KeyID() }), gatewayInputs, conformance.CheckIssuerKeyID)
	cs.add("tampered-unknown-kind", "", "issuer.kind is neither gateway nor sdk", g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Issuer.Kind = "plugin" }), gatewayInputs, conformance.CheckIssuerKind)
	cs.add("tampered-gateway-no-policy", "", "a gateway receipt with no policy decision", g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Policy = nil }), gatewayInputs, conformance.CheckCarriesPolicy)
	strangerGrant := g.signGrant("mallory", "alice", "agent-a", []string{"transfer"}, grantIssuedAt, grantTTL, "", nil)
	cs.add("tampered-untrusted-principal", "", "the grant was signed by a key that is not a trusted principal's",
		g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Delegation.Envelope = strangerGrant }), gatewayInputs, conformance.CheckDelegationSignature)
	cs.add("tampered-agent-mismatch", "", "the receipt names an agent the grant does not", g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Agent.ID = "agent-z" }), gatewayInputs, conformance.CheckDelegationBinds)
	cs.add("tampered-grant-expired", "", "the receipt is dated after the grant expired",
		g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Timestamp = receipt.FormatTime(grantIssuedAt.Add(grantTTL + time.Hour)) }), gatewayInputs, conformance.CheckDelegationValid)
	cs.add("tampered-tool-out-of-scope", "", "an executed call names a tool outside the grant's scopes",
		g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Tool.Name = "delete_repo" }), gatewayInputs, conformance.CheckToolInScope)
	deep := g.signGrant("agent-c", "alice", "agent-d", []string{"search"}, grantIssuedAt.Add(3*time.Hour), time.Hour, "", mustPredicateChain3(g))
	cs.add("tampered-chain-too-deep", "", "four grants deep; at most three are allowed",
		g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) {
			p.Delegation.Envelope = deep
			p.Agent.ID = "agent-d"
			p.Tool.Name = "search"
		}), gatewayInputs, conformance.CheckDelegationChain)
	cs.add("tampered-sdk-claims-attested", "", "an SDK receipt labels its principal attested", g.mustReissue(sdkOK, "sdk", sdkLog, func(p *receipt.Predicate) { p.Principal.Provenance = receipt.Attested }), sdkInputs, conformance.CheckPrincipalClaimed)
	cs.add("tampered-args-digest", "", "request.args edited while argsDigest kept", g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Request.Args = raw(`{"amount":990000,"currency":"EUR","to":"acct-666"}`) }), gatewayInputs, conformance.CheckArgsDigest)
	cs.add("tampered-upstream-content", "", "the result differs from what the upstream signed",
		g.mustReissue(attB, "gateway", gwLog, func(p *receipt.Predicate) {
			p.Execution.Result = toolResult("transferred 99.00 EUR to acct-666", false)
		}),
		with(gatewayInputs, func(i *conformance.CaseInputs) { i.UpstreamKeys = []string{"upstream"} }), conformance.CheckUpstreamKey)
	cs.add("tampered-payment-stale", "", "the receipt is dated more than five minutes from the payment delivery",
		g.mustReissue(payB, "gateway", gwLog, func(p *receipt.Predicate) {
			at, _ := receipt.ParseTime(p.Timestamp)
			p.Timestamp = receipt.FormatTime(at.Add(10 * time.Minute))
		}), with(gatewayInputs, func(i *conformance.CaseInputs) { i.Secrets = []string{receipt.ProviderPaymentWebhook} }), conformance.CheckProviderSecret)
	cs.add("tampered-allow-with-errors", "", "an allow recorded beside evaluation errors", g.mustReissue(executedB, "gateway", gwLog, func(p *receipt.Predicate) { p.Policy.Errors = []string{"type error"} }), gatewayInputs, conformance.CheckNoPolicyErrors)
	rogueAuth := *mustPredicate(precommitB).Authorization
	rogueAuth.Envelope = receipt.Sign(rogueAuth.Envelope.PayloadType, rogueAuth.Envelope.Payload, g.keys["rogue"])
	cs.add("tampered-authorization-signer", "", "the authorization was signed by another key",
		g.mustReissue(precommitB, "gateway", gwLog, func(p *receipt.Predicate) { a := rogueAuth; p.Authorization = &a }), gatewayInputs, conformance.CheckAuthSignature)
	rogueHead := *mustPredicate(precommitB).Authorization
	rogueHead.TreeHead = receipt.Sign(rogueHead.TreeHead.PayloadType, rogueHead.TreeHead.Payload, g.keys["rogue"])
	cs.add("tampered-authorization-head", "", "the authorization's tree head is signed by an untrusted key",
		g.mustReissue(precommitB, "gateway", gwLog, func(p *receipt.Predicate) { a := rogueHead; p.Authorization = &a }), gatewayInputs, conformance.CheckAuthTreeHead)
	badProof := *mustPredicate(precommitB).Authorization
	badProof.Inclusion.LeafIndex++
	cs.add("tampered-authorization-proof", "", "the authorization's inclusion proof names another leaf",
		g.mustReissue(precommitB, "gateway", gwLog, func(p *receipt.Predicate) { a := badProof; p.Authorization = &a }), gatewayInputs, conformance.CheckAuthInclusion)
	headRogue := cloneBundle(executedB)
	headRogue.TreeHead = receipt.Sign(headRogue.TreeHead.PayloadType, headRogue.TreeHead.Payload, g.keys["rogue"])
	cs.add("tampered-tree-head-signer", "", "the tree head is signed by an untrusted key", headRogue, gatewayInputs, conformance.CheckTreeHeadSignature)
	cs.add("tampered-wrong-log-id", "", "the head names a log other than the expected one", remoteB, with(remoteInputs, func(i *conformance.CaseInputs) { i.LogID = "acme-staging" }), conformance.CheckTreeHeadLog)
	sizeB := cloneBundle(executedB)
	sizeB.Inclusion.TreeSize++
	cs.add("tampered-proof-size", "", "the inclusion proof is for another tree size than the head's", sizeB, gatewayInputs, conformance.CheckTreeHeadSize)
	witnessedB := cloneBundle(executedB)
	witnessedB.TreeHead.AddSignature(g.keys["witness"])
	withWitness := with(gatewayInputs, func(i *conformance.CaseInputs) { i.WitnessKeys = []string{"witness"} })
	if err := g.addVerify("gateway-witnessed-head", "the receipt's tree head is countersigned by a witness (verify --witness-key)", "", witnessedB, withWitness, ""); err != nil {
		return err
	}
	cs.add("tampered-head-not-witnessed", "", "a witness is required and the head carries no countersignature", executedB, withWitness, conformance.CheckWitnessCovers)
	idxB := cloneBundle(executedB)
	idxB.Inclusion.LeafIndex++
	cs.add("tampered-proof-index", "", "the inclusion proof names another leaf index", idxB, gatewayInputs, conformance.CheckInclusion)

	return nil
}

// lateAuthorization builds a receipt whose authorization was logged in a second log of
// the same issuer after the receipt's own leaf position: evidence written after the
// side effect.
func (g *gen) lateAuthorization(gw *receipt.Issuer, gwLog *receipt.FileLog) (*receipt.Bundle, error) {
	side, err := g.log("gateway-side", "gateway", "")
	if err != nil {
		return nil, err
	}
	// Pad the side log so the authorization lands at a high index.
	for i := 0; i < 64; i++ {
		if _, err := side.Append(context.Background(), []byte(`{"padding":`+strconv.Itoa(i)+`}`)); err != nil {
			return nil, err
		}
	}
	sideIssuer, err := g.issuer(receipt.KindGateway, "gateway", side)
	if err != nil {
		return nil, err
	}
	p, err := sideIssuer.Begin(g.gatewayCall(g.grant, "agent-a", "deploy", `{"service":"web","version":"2.0.0"}`, receipt.Allow, "allow-deploys"))
	if err != nil {
		return nil, err
	}
	if err := sideIssuer.Authorize(context.Background(), p); err != nil {
		return nil, err
	}
	// The receipt goes to a fresh log, at a position before the authorization's.
	fresh, err := g.log("gateway-late", "gateway", "")
	if err != nil {
		return nil, err
	}
	freshIssuer, err := g.issuer(receipt.KindGateway, "gateway", fresh)
	if err != nil {
		return nil, err
	}
	return freshIssuer.Finish(context.Background(), p, executed(toolResult("deployed web 2.0.0", false), receipt.Observed))
}

func cloneBundle(b *receipt.Bundle) *receipt.Bundle {
	data, _ := json.Marshal(b)
	var out receipt.Bundle
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	return &out
}

func mustPredicate(b *receipt.Bundle) *receipt.Predicate {
	_, p, err := receipt.DecodeReceipt(b.Envelope)
	if err != nil {
		panic(err)
	}
	return p
}

func mustPredicateChain3(g *gen) *receipt.Envelope {
	chain2 := g.signGrant("agent-a", "alice", "agent-b", []string{"search"}, grantIssuedAt.Add(time.Hour), 7*24*time.Hour, "agent-b", g.grant)
	return g.signGrant("agent-b", "alice", "agent-c", []string{"search"}, grantIssuedAt.Add(2*time.Hour), 24*time.Hour, "agent-c", chain2)
}

// divergedLog copies a log file with its first leaf replaced, so every root from size 1
// on differs.
func (g *gen) divergedLog(from, to string) (string, error) {
	data, err := os.ReadFile(filepath.Join(g.dir, from))
	if err != nil {
		return "", err
	}
	lines := strings.SplitAfter(string(data), "\n")
	lines[0] = `"{\"forged\":true}"` + "\n"
	return to, os.WriteFile(filepath.Join(g.dir, to), []byte(strings.Join(lines, "")), 0o644)
}
