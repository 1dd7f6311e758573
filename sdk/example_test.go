package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"svc.dev/svc/conformance"
	"svc.dev/svc/policy"
	"svc.dev/svc/receipt"
	"svc.dev/svc/sdk"
	"svc.dev/svc/signer"
)

// An agent framework written in Go asks the policy, runs the tool, records the
// outcome and gets a receipt bundle back, which verifies with the public key only.
func Example() {
	dir, _ := os.MkdirTemp("", "sdk-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	key, _ := signer.KeyFromSeed(bytes.Repeat([]byte{1}, 32))
	log, _ := receipt.OpenFileLog(filepath.Join(dir, "receipts.log"), key, "")
	defer log.Close()
	pol, _ := policy.Parse("policy.cedar", []byte(`
@id("small-refunds")
permit (principal == Agent::"billing-bot", action == Action::"refund", resource)
when { context.args.amount <= 100 };`))

	is, err := sdk.New(sdk.Settings{
		Key: key, AgentID: "billing-bot", Framework: "example-go-agent", Policy: pol, Log: log,
		ReceiptsDir: filepath.Join(dir, "receipts"),
		Now:         func() time.Time { return time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		panic(err)
	}
	defer is.Close(ctx)

	ev := sdk.ToolEvent{Tool: "refund", Args: json.RawMessage(`{"amount": 40, "order": "A-17"}`)}
	dec, _ := is.Decide(ev)
	fmt.Println("policy:", dec.Decision, dec.Reasons)

	result := map[string]any{"refunded": 40} // the framework ran the tool
	rc, err := is.Record(ctx, ev, sdk.Executed(result), dec)
	if err != nil {
		panic(err)
	}

	data, _ := os.ReadFile(rc.Path)
	rep := conformance.VerifyBytes(data, conformance.Options{IssuerKeys: []signer.PublicKey{key.Public()}})
	fmt.Println("verify:", rep.Result)

	st, _ := receipt.DecodeStatement(rc.Bundle.Envelope)
	p, _ := st.DecodePredicate()
	fmt.Println("issuer:", p.Issuer.Kind, p.Issuer.Framework)
	fmt.Println("principal:", p.Principal.ID == nil, p.Principal.Provenance)
	fmt.Println("agent:", p.Agent.ID, p.Agent.Provenance)
	fmt.Println("delegation:", p.Delegation != nil, "facts:", len(p.Facts))
	fmt.Println("tool:", p.Tool.Name, p.Tool.Provenance)
	fmt.Println("policy:", p.Policy.Decision, p.Policy.Provenance)
	fmt.Println("execution:", p.Execution.Status, string(p.Execution.Result), p.Execution.Provenance)
	fmt.Println("log leaf:", rc.Bundle.Inclusion.LeafIndex, "of", rc.Bundle.Inclusion.TreeSize)
	// Output:
	// policy: allow [small-refunds]
	// verify: VERIFIED
	// issuer: sdk example-go-agent
	// principal: true claimed
	// agent: billing-bot claimed
	// delegation: false facts: 0
	// tool: refund claimed
	// policy: allow claimed
	// execution: executed {"refunded":40} claimed
	// log leaf: 0 of 1
}
