package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func init() {
	register("tools", "tool definitions a gateway logged: svc tools diff <a> <b>", runTools)
}

const toolsHelp = `svc tools diff compares two tool-definitions statements (the <statementId>.tools.json
files a gateway writes beside its receipts each time it logs an upstream's tools): the
tools added (+), removed (-) and changed (~), and for a changed tool each member of
its definition (title, description, inputSchema, outputSchema, annotations) before and
after. Each statement's definitions are checked against their digests; with
--issuer-key its signature too. Exit 0 when the two list the same definitions, 1 when
they differ (as diff does), 2 on bad input.

Example:
  svc tools diff receipts/0a1b….tools.json receipts/9f8e….tools.json --issuer-key keys/gateway.pub`

func runTools(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools", "diff <a.tools.json> <b.tools.json> [--issuer-key <pub>]", toolsHelp, stderr)
	var issuerKeys listFlag
	fs.Var(&issuerKeys, "issuer-key", "trusted gateway public key `file` the statements must be signed by; repeatable")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 || pos[0] != "diff" {
		return usagef("want: svc tools diff <a.tools.json> <b.tools.json>")
	}
	keys, err := signer.LoadPublicKeys(issuerKeys)
	if err != nil {
		return err
	}
	var st [2]*receipt.ToolDefinitionsPredicate
	for i, path := range pos[1:] {
		if st[i], err = readToolStatement(path, keys); err != nil {
			return err
		}
	}
	if !writeToolsDiff(stdout, st[0], st[1]) {
		return exitCode(1)
	}
	return nil
}

// readToolStatement reads a tool-definitions statement's bundle file, its digests
// checked and, with keys, its signature.
func readToolStatement(path string, keys []signer.PublicKey) (*receipt.ToolDefinitionsPredicate, error) {
	b, err := receipt.ReadBundle(path)
	if err != nil {
		return nil, err
	}
	if len(keys) > 0 {
		if _, err := b.Envelope.Verify(keys); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	p, err := receipt.DecodeToolDefinitions(b.Envelope)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// writeToolsDiff writes what changed from a to b and reports whether nothing did.
func writeToolsDiff(w io.Writer, a, b *receipt.ToolDefinitionsPredicate) bool {
	fmt.Fprintf(w, "upstream %s (%s) -> upstream %s (%s)\n", a.Upstream, a.Timestamp, b.Upstream, b.Timestamp)
	before := map[string]receipt.ToolDefinition{}
	for _, t := range a.Tools {
		before[t.Name] = t
	}
	same := true
	seen := map[string]bool{}
	for _, t := range b.Tools {
		seen[t.Name] = true
		old, ok := before[t.Name]
		switch {
		case !ok:
			same = false
			fmt.Fprintf(w, "+ %s %s\n", t.Name, t.DefinitionDigest)
		case old.DefinitionDigest != t.DefinitionDigest:
			same = false
			fmt.Fprintf(w, "~ %s %s -> %s\n", t.Name, old.DefinitionDigest, t.DefinitionDigest)
			writeMemberChanges(w, old.Definition, t.Definition)
		}
	}
	for _, t := range a.Tools {
		if !seen[t.Name] {
			same = false
			fmt.Fprintf(w, "- %s %s\n", t.Name, t.DefinitionDigest)
		}
	}
	if same {
		fmt.Fprintln(w, "same definitions")
	}
	return same
}

// writeMemberChanges writes each member of a definition that differs, before and after
// (canonical JSON; absent when the definition lacks it).
func writeMemberChanges(w io.Writer, a, b json.RawMessage) {
	var ma, mb map[string]json.RawMessage
	_ = json.Unmarshal(a, &ma) // canonical definitions: DecodeToolDefinitions read them
	_ = json.Unmarshal(b, &mb)
	for _, m := range receipt.ToolDefinitionMembers {
		va, vb := ma[m], mb[m]
		if bytes.Equal(va, vb) {
			continue
		}
		fmt.Fprintf(w, "    %s:\n      - %s\n      + %s\n", m, orAbsent(va), orAbsent(vb))
	}
}

func orAbsent(v json.RawMessage) string {
	if v == nil {
		return "(absent)"
	}
	return string(v)
}
