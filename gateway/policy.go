package gateway

import (
	"context"

	"svc.dev/svc/policy"
)

// CedarPolicy loads Cedar policy text as the gateway's Decider (package policy holds
// the evaluation the SDK's /decide shares).
func CedarPolicy(text []byte) (Decider, error) {
	p, err := policy.Parse("policy", text)
	if err != nil {
		return nil, err
	}
	return cedarDecider{p}, nil
}

type cedarDecider struct{ p *policy.Policy }

func (d cedarDecider) Decide(_ context.Context, r PolicyRequest) PolicyDecision {
	dec := d.p.Evaluate(policy.Request{Agent: r.Agent, Tool: r.Tool, Args: r.Args, Facts: r.Facts,
		Grant: &policy.Grant{Principal: r.Grant.Principal, Scopes: r.Grant.Scopes}})
	return PolicyDecision{Decision: dec.Decision, Reasons: dec.Reasons, Errors: dec.Errors}
}
