package conformance

import (
	"fmt"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// toolDefinition runs the tool-definition checks of a gateway receipt whose tool
// cites a definition (tool.definitionDigest, tool.definitionLeafIndex), when
// tool-definitions statements are given (else it notes that they were not): a
// tool-definitions statement among Options.ToolDefinitions, signed by the receipt's
// issuer key and included in the log under a signed head, lists the tool with that
// digest at that leaf; and that leaf precedes the receipt's.
func (v *verification) toolDefinition() {
	r, t := v.r, v.pred.Tool
	if len(v.opts.ToolDefinitions) == 0 {
		// Like the log file check, these run only with their input.
		r.Notes = append(r.Notes, fmt.Sprintf("tool %s cites definition %s; no tool-definitions statement was given (the *.tools.json a gateway writes beside its receipts, or --tool-definitions), so it was not checked", t.Name, short(t.DefinitionDigest)))
		return
	}
	var found *receipt.Bundle
	why := ""
	for _, b := range v.opts.ToolDefinitions {
		if t.DefinitionLeafIndex != nil && b.Inclusion.LeafIndex != *t.DefinitionLeafIndex {
			continue
		}
		if msg := v.toolStatementLists(b, t); msg != "" {
			why = msg
			continue
		}
		found = b
		break
	}
	switch {
	case found != nil || why != "":
	default:
		why = fmt.Sprintf("none of the %d tool-definitions statements given is leaf %d", len(v.opts.ToolDefinitions), *t.DefinitionLeafIndex)
	}
	if found == nil {
		r.add(CheckToolDefinitionLogged, false, "tool %s, definition %s: %s", t.Name, short(t.DefinitionDigest), why)
		r.add(CheckToolDefinitionBefore, false, "no statement logged the definition")
		return
	}
	r.add(CheckToolDefinitionLogged, true, "tool %s, definition %s, in the tool-definitions statement at leaf %d", t.Name, short(t.DefinitionDigest), found.Inclusion.LeafIndex)
	si, ri := found.Inclusion, v.b.Inclusion
	before := si.LeafIndex < ri.LeafIndex && si.TreeSize <= ri.TreeSize
	r.add(CheckToolDefinitionBefore, before, "statement leaf %d (tree size %d), receipt leaf %d (tree size %d)", si.LeafIndex, si.TreeSize, ri.LeafIndex, ri.TreeSize)
}

// toolStatementLists returns "" when b is a tool-definitions statement, signed by the
// receipt's issuer key and proved in the log under a head the verifier trusts, that
// lists tool t with t's definition digest; else why not.
func (v *verification) toolStatementLists(b *receipt.Bundle, t receipt.Tool) string {
	s := v.opts.cache.statement(b, v.checkStatement)
	if s.keyErr != nil {
		return fmt.Sprintf("statement at leaf %d: %v", b.Inclusion.LeafIndex, s.keyErr)
	}
	if v.signerKey.KeyID != "" && s.key.KeyID != v.signerKey.KeyID {
		return fmt.Sprintf("statement at leaf %d is signed by %s, the receipt by %s", b.Inclusion.LeafIndex, short(s.key.KeyID), short(v.signerKey.KeyID))
	}
	if s.predErr != nil {
		return fmt.Sprintf("statement at leaf %d: %v", b.Inclusion.LeafIndex, s.predErr)
	}
	p := s.pred
	if t.Upstream != "" && p.Upstream != t.Upstream {
		return fmt.Sprintf("statement at leaf %d is upstream %s's, the call went to %s", b.Inclusion.LeafIndex, p.Upstream, t.Upstream)
	}
	if s.headErr != nil {
		return fmt.Sprintf("statement at leaf %d: tree head: %v", b.Inclusion.LeafIndex, s.headErr)
	}
	if s.inclErr != nil {
		return fmt.Sprintf("statement at leaf %d: %v", b.Inclusion.LeafIndex, s.inclErr)
	}
	for _, d := range p.Tools {
		if d.Name == t.Name {
			if d.DefinitionDigest != t.DefinitionDigest {
				return fmt.Sprintf("the statement at leaf %d logged %s's definition as %s, not %s", b.Inclusion.LeafIndex, t.Name, short(d.DefinitionDigest), short(t.DefinitionDigest))
			}
			return ""
		}
	}
	return fmt.Sprintf("the statement at leaf %d lists no tool %s", b.Inclusion.LeafIndex, t.Name)
}

// statementResult is what a tool-definitions statement's checks found that does not
// depend on the receipt citing it: its signature, its predicate, its head and its
// inclusion.
type statementResult struct {
	key     signer.PublicKey
	keyErr  error
	pred    *receipt.ToolDefinitionsPredicate
	predErr error
	headErr error
	inclErr error
}

// checkStatement runs those checks on b.
func (v *verification) checkStatement(b *receipt.Bundle) *statementResult {
	s := &statementResult{}
	s.key, s.keyErr = b.Envelope.Verify(v.opts.IssuerKeys)
	s.pred, s.predErr = receipt.DecodeToolDefinitions(b.Envelope)
	th, _, err := v.verifyHead(b.TreeHead)
	if s.headErr = err; err == nil {
		s.inclErr = inclusion(b.Envelope, b.Inclusion, th)
	}
	return s
}
