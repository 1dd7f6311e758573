package conformance

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// VectorsFormat names the manifest format; see docs/conformance-vectors.md.
const VectorsFormat = "svc-conformance/v1"

// Manifest is vectors/manifest.json: every case with its inputs and expected verdict.
// Paths are relative to the manifest's directory.
type Manifest struct {
	Format  string            `json:"format"`
	Note    string            `json:"note"`
	Keys    map[string]string `json:"keys"`    // key name → .pub path
	Secrets map[string]string `json:"secrets"` // provider kind → shared secret (test values)
	Cases   []Case            `json:"cases"`
}

// Case is one vector.
type Case struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Kind        string `json:"kind"` // "verify" or "audit"
	// Cause is, for a tampered vector, which typical cause of SPEC.md's "Verifier and
	// tools" it stands for.
	Cause  string     `json:"cause,omitempty"`
	Bundle string     `json:"bundle,omitempty"` // verify: the bundle
	Older  string     `json:"older,omitempty"`  // audit: the older head
	Newer  string     `json:"newer,omitempty"`  // audit: the newer head
	Inputs CaseInputs `json:"inputs"`
	Expect Expect     `json:"expect"`
}

// CaseInputs are the verifier's inputs, as key names of Manifest.Keys and paths.
type CaseInputs struct {
	IssuerKeys    []string `json:"issuerKeys,omitempty"`
	PrincipalKeys []string `json:"principalKeys,omitempty"`
	LogKeys       []string `json:"logKeys,omitempty"`
	UpstreamKeys  []string `json:"upstreamKeys,omitempty"`
	WitnessKeys   []string `json:"witnessKeys,omitempty"`
	Log           string   `json:"log,omitempty"`     // a log file copy
	LogID         string   `json:"logId,omitempty"`   // expected log id
	Secrets       []string `json:"secrets,omitempty"` // provider kinds whose secret is given
}

// Expect is the verdict a conforming verifier reaches.
type Expect struct {
	Result      string   `json:"result"`                // "VERIFIED" or "FAILED"
	FailedCheck string   `json:"failedCheck,omitempty"` // the first check that fails
	Checks      []string `json:"checks"`                // the checks that run, in order
}

// LoadManifest reads dir/manifest.json.
func LoadManifest(dir string) (*Manifest, error) {
	data, err := readFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Format != VectorsFormat {
		return nil, fmt.Errorf("manifest format %q, want %q", m.Format, VectorsFormat)
	}
	return &m, nil
}
