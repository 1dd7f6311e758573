// Package sdk is the in-process SDK issuer: an agent framework written in Go records
// each tool event and its outcome and gets a signed receipt bundle back, whose hash is
// in a Merkle log. The sidecar (package sidecar, `svc serve`) puts the same issuer
// behind a local HTTP API for every other language; both read the same config file
// (docs/sdk-config.md) and write the same receipts with the same key.
//
// An SDK runs in the agent's own process, so it self-reports: every receipt has
// issuer.kind sdk and issuer.framework, principal { id or null, provenance: claimed },
// agent claimed, no delegation, facts {}, and tool, request, session, model, policy and
// execution claimed. A verifier reports such a receipt as self-reported and runs the
// check "principal is claimed, not attested" instead of the delegation checks.
//
// The flow for one call:
//
//	ev := sdk.ToolEvent{Tool: "refund", Args: json.RawMessage(`{"amount": 40}`)}
//	dec, _ := is.Decide(ev)                          // nil when no policy is configured
//	if dec != nil && dec.Decision == "deny" {
//	    is.Record(ctx, ev, sdk.Denied("policy: "+strings.Join(dec.Reasons, ", ")), dec)
//	} else {
//	    result, err := callTheTool(ev)
//	    ... is.Record(ctx, ev, sdk.Executed(result), dec)   // or Failed, Errored
//	}
//
// Decide evaluates the optional Cedar policy with package policy, the code the gateway
// uses. Record signs, appends the receipt's hash to the log, writes
// receipts/<id>.json atomically and hands the bundle to the exporters, which never
// delay or fail it. If the log does not take the leaf, Record returns a *LogError and
// nothing is written; a malformed event or outcome is an *InputError.
package sdk
