package vectorgen

import (
	"os"
	"path/filepath"
	"strings"

	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
)

// audits writes the audit vectors: a log that grew honestly, one whose history was
// rewritten, a fork at one size, a shrink, and the witness requirement.
func (g *gen) audits(gw *receipt.Issuer, gwLog *receipt.FileLog, first *receipt.Bundle) error {
	call := g.gatewayCall(g.grant, "agent-a", "search", `{"q":"status"}`, receipt.Allow, "allow-search")
	ok := func(*receipt.Pending) receipt.Execution {
		return executed(toolResult("all systems normal", false), receipt.Observed)
	}
	last, _, err := issue(gw, call, false, ok)
	if err != nil {
		return err
	}
	in := conformance.CaseInputs{IssuerKeys: []string{"gateway"}, Log: "logs/gateway.log"}
	if err := g.addAudit("audit-log-extends", "the newer head extends the older one", "", first, last, in, ""); err != nil {
		return err
	}
	if err := g.addAudit("audit-older-larger", "the heads were given the wrong way round: a log never shrinks", "", last, first, in, conformance.CheckOlderNotLarger); err != nil {
		return err
	}
	witnessed := cloneBundle(last)
	witnessed.TreeHead.AddSignature(g.keys["witness"])
	withWitness := conformance.CaseInputs{IssuerKeys: []string{"gateway"}, Log: "logs/gateway.log", WitnessKeys: []string{"witness"}}
	if err := g.addAudit("audit-witnessed", "the newer head carries a witness countersignature", "", first, witnessed, withWitness, ""); err != nil {
		return err
	}
	if err := g.addAudit("audit-witness-missing", "a witness is required and the newer head has no countersignature", "", first, last, withWitness, conformance.CheckWitnessCosigned); err != nil {
		return err
	}

	// History rewritten: a second log shares the first two leaves of the first and
	// then differs; both are signed by the same key.
	hist, err := g.log("history", "gateway", "")
	if err != nil {
		return err
	}
	histIssuer, err := g.issuer(receipt.KindGateway, "gateway", hist)
	if err != nil {
		return err
	}
	var older *receipt.Bundle
	for i := 0; i < 3; i++ {
		if older, _, err = issue(histIssuer, call, false, ok); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(filepath.Join(g.dir, "logs", "history.log"))
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	if err := os.WriteFile(filepath.Join(g.dir, "logs", "rewritten.log"), []byte(lines[0]+lines[1]), 0o644); err != nil {
		return err
	}
	rw, err := g.log("rewritten", "gateway", "")
	if err != nil {
		return err
	}
	rwIssuer, err := g.issuer(receipt.KindGateway, "gateway", rw)
	if err != nil {
		return err
	}
	var newer, sameSize *receipt.Bundle
	for i := 0; i < 4; i++ {
		if newer, _, err = issue(rwIssuer, call, false, ok); err != nil {
			return err
		}
		if i == 0 {
			sameSize = newer
		}
	}
	rin := conformance.CaseInputs{IssuerKeys: []string{"gateway"}, Log: "logs/rewritten.log"}
	if err := g.addAudit("audit-history-rewritten", "the operator rewrote the log after the older head was handed out", "history rewritten between two heads (audit fails)", older, newer, rin, conformance.CheckNewerExtends); err != nil {
		return err
	}
	return g.addAudit("audit-fork-same-size", "two heads at one size with different roots: a second history", "history rewritten between two heads (audit fails)", older, sameSize, rin, conformance.CheckNewerExtends)
}
