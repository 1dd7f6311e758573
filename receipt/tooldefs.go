package receipt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// A tool-definitions statement ({spec_base}/tool-definitions/v0.1) records the tools
// an upstream offered at one moment: each tool's name and the digest of its canonical
// definition (CanonicalToolDefinition), with the definition itself. Its subject is
// tool-definitions:<upstream> with the digest of the tool list (ToolListDigest). A
// gateway logs one when it connects to an upstream and whenever the upstream's tools
// change; a receipt's tool.definitionDigest and tool.definitionLeafIndex cite it.

// ToolDefinitionMembers are the members of a tool that make its definition: what the
// model reads (title, description), what it may send (inputSchema), what it gets
// back (outputSchema) and the hints (annotations). Anything else a tool carries
// (_meta, icons) is not part of the definition.
var ToolDefinitionMembers = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// ToolDefinitionsPredicate is the tool-definitions statement's predicate.
type ToolDefinitionsPredicate struct {
	StatementID string           `json:"statementId"` // also the file name: <statementId>.tools.json
	Timestamp   string           `json:"timestamp"`
	Issuer      IssuerInfo       `json:"issuer"`
	Upstream    string           `json:"upstream"`
	Tools       []ToolDefinition `json:"tools"`
}

// ToolDefinition is one tool of a tool-definitions statement.
type ToolDefinition struct {
	Name             string          `json:"name"`
	DefinitionDigest string          `json:"definitionDigest"`
	Definition       json.RawMessage `json:"definition"` // canonical: the members of ToolDefinitionMembers
}

// ToolDefinitionsSubjectName is the subject name of upstream's tool-definitions statement.
func ToolDefinitionsSubjectName(upstream string) string { return "tool-definitions:" + upstream }

// CanonicalToolDefinition returns the canonical definition of a tool as an upstream
// sent it (a JSON object): its ToolDefinitionMembers, RFC 8785, and its digest (SHA-256,
// hex). Members it lacks are left out; a tool without a string name is an error.
func CanonicalToolDefinition(tool json.RawMessage) (canonical []byte, digest string, err error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(tool, &all); err != nil {
		return nil, "", fmt.Errorf("tool definition: %w", err)
	}
	var name string
	if err := json.Unmarshal(all["name"], &name); err != nil || name == "" {
		return nil, "", errors.New("tool definition: no name (a non-empty string)")
	}
	def := make(map[string]json.RawMessage, len(ToolDefinitionMembers))
	for _, m := range ToolDefinitionMembers {
		if v, ok := all[m]; ok {
			def[m] = v
		}
	}
	b, err := json.Marshal(def)
	if err != nil {
		return nil, "", fmt.Errorf("tool definition %s: %w", name, err)
	}
	if canonical, err = CanonicalizeJSON(b); err != nil {
		return nil, "", fmt.Errorf("tool definition %s: canonical json: %w", name, err)
	}
	return canonical, sha256Hex(canonical), nil
}

// ToolListDigest is the digest of a tool list: SHA-256 (hex) of the canonical JSON of
// the array of {name, definitionDigest}, in the list's order.
func ToolListDigest(tools []ToolDefinition) string {
	b := []byte{'['}
	for i, t := range tools {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"definitionDigest":`...)
		b = appendJCSString(b, t.DefinitionDigest)
		b = append(b, `,"name":`...)
		b = appendJCSString(b, t.Name)
		b = append(b, '}')
	}
	return sha256Hex(append(b, ']'))
}

// NewToolDefinitions digests each of an upstream's tools as it sent them.
func NewToolDefinitions(tools []json.RawMessage) ([]ToolDefinition, error) {
	out := make([]ToolDefinition, 0, len(tools))
	for _, raw := range tools {
		c, d, err := CanonicalToolDefinition(raw)
		if err != nil {
			return nil, err
		}
		var n struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(c, &n) // CanonicalToolDefinition read it
		out = append(out, ToolDefinition{Name: n.Name, DefinitionDigest: d, Definition: c})
	}
	return out, nil
}

// LogToolDefinitions signs upstream's tool-definitions statement over tools, appends
// it to the log and writes receipts/<statementId>.tools.json. The bundle's leaf index
// is what receipts cite as tool.definitionLeafIndex.
func (is *Issuer) LogToolDefinitions(ctx context.Context, upstream string, tools []ToolDefinition) (*Bundle, error) {
	id := is.newID()
	if !isReceiptFileID(id) {
		return nil, fmt.Errorf("issuer: statement id %q is not a plain file name", id)
	}
	pred := ToolDefinitionsPredicate{StatementID: id, Timestamp: FormatTime(is.now()), Issuer: is.issuerInfo(), Upstream: upstream, Tools: tools}
	if pred.Tools == nil {
		pred.Tools = []ToolDefinition{}
	}
	raw, err := json.Marshal(&pred)
	if err != nil {
		return nil, fmt.Errorf("tool-definitions predicate: %w", err)
	}
	st := &Statement{Type: StatementType, PredicateType: PredicateToolDefinitions, Predicate: raw,
		Subject: []Subject{{Name: ToolDefinitionsSubjectName(upstream), Digest: map[string]string{"sha256": ToolListDigest(tools)}}}}
	payload, err := st.Canonical()
	if err != nil {
		return nil, fmt.Errorf("tool-definitions statement: %w", err)
	}
	return is.logAndWrite(ctx, id+".tools.json", Sign(PayloadInToto, payload, is.key))
}

// DecodeToolDefinitions reads a tool-definitions statement from its envelope and
// checks what the envelope alone can: the predicate type, each definition's digest,
// and the subject's digest of the list. The signature is the caller's to check.
func DecodeToolDefinitions(env *Envelope) (*ToolDefinitionsPredicate, error) {
	st, err := DecodeStatement(env)
	if err != nil {
		return nil, err
	}
	if st.Type != StatementType || st.PredicateType != PredicateToolDefinitions {
		return nil, fmt.Errorf("predicateType %q, want %q", st.PredicateType, PredicateToolDefinitions)
	}
	var p ToolDefinitionsPredicate
	if err := json.Unmarshal(st.Predicate, &p); err != nil {
		return nil, fmt.Errorf("tool-definitions predicate: %w", err)
	}
	for _, t := range p.Tools {
		_, d, err := CanonicalToolDefinition(t.Definition)
		if err != nil {
			return nil, err
		}
		var n struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(t.Definition, &n) != nil || n.Name != t.Name {
			return nil, fmt.Errorf("tool %s: its definition names %q", t.Name, n.Name)
		}
		if d != t.DefinitionDigest {
			return nil, fmt.Errorf("tool %s: definitionDigest %s, but its definition digests to %s", t.Name, t.DefinitionDigest, d)
		}
	}
	if len(st.Subject) != 1 || st.Subject[0].Name != ToolDefinitionsSubjectName(p.Upstream) || st.Subject[0].Digest["sha256"] != ToolListDigest(p.Tools) {
		return nil, errors.New("tool-definitions subject: not tool-definitions:<upstream> with the digest of the tool list")
	}
	return &p, nil
}
