package conformance

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
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
	// ToolDefinitions are tool-definitions statement files given to the verifier.
	ToolDefinitions []string `json:"toolDefinitions,omitempty"`
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

// RunCase runs one vector through the reference verifier or auditor.
func RunCase(dir string, m *Manifest, c *Case) (*Report, error) {
	switch c.Kind {
	case "verify":
		opts, err := caseOptions(dir, m, c)
		if err != nil {
			return nil, err
		}
		data, err := readFile(filepath.Join(dir, c.Bundle))
		if err != nil {
			return nil, err
		}
		return VerifyBytes(data, opts), nil
	case "audit":
		var opts AuditOptions
		var err error
		if opts.Keys, err = manifestKeys(dir, m, append(append([]string{}, c.Inputs.IssuerKeys...), c.Inputs.LogKeys...)); err != nil {
			return nil, err
		}
		if opts.WitnessKeys, err = manifestKeys(dir, m, c.Inputs.WitnessKeys); err != nil {
			return nil, err
		}
		opts.LogID = c.Inputs.LogID
		older, err := ReadHeadFile(filepath.Join(dir, c.Older))
		if err != nil {
			return nil, err
		}
		newer, err := ReadHeadFile(filepath.Join(dir, c.Newer))
		if err != nil {
			return nil, err
		}
		var src ConsistencySource
		if c.Inputs.Log != "" {
			if src, err = OpenFileCopy(filepath.Join(dir, c.Inputs.Log)); err != nil {
				return nil, err
			}
		}
		return Audit(older, newer, src, opts), nil
	}
	return nil, fmt.Errorf("unknown case kind %q", c.Kind)
}

func manifestKeys(dir string, m *Manifest, names []string) ([]signer.PublicKey, error) {
	var out []signer.PublicKey
	for _, n := range names {
		p, ok := m.Keys[n]
		if !ok {
			return nil, fmt.Errorf("unknown key %q", n)
		}
		k, err := signer.LoadPublicKey(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// caseOptions builds the verifier's options for a verify case.
func caseOptions(dir string, m *Manifest, c *Case) (Options, error) {
	opts := Options{LogID: c.Inputs.LogID, ProviderSecrets: map[string][]byte{}}
	var err error
	for _, k := range []struct {
		names []string
		into  *[]signer.PublicKey
	}{{c.Inputs.IssuerKeys, &opts.IssuerKeys}, {c.Inputs.PrincipalKeys, &opts.PrincipalKeys}, {c.Inputs.LogKeys, &opts.LogKeys}, {c.Inputs.UpstreamKeys, &opts.UpstreamKeys}} {
		if *k.into, err = manifestKeys(dir, m, k.names); err != nil {
			return opts, err
		}
	}
	for _, s := range c.Inputs.Secrets {
		opts.ProviderSecrets[s] = []byte(m.Secrets[s])
	}
	if opts.WitnessKeys, err = manifestKeys(dir, m, c.Inputs.WitnessKeys); err != nil {
		return opts, err
	}
	for _, f := range c.Inputs.ToolDefinitions {
		b, err := receipt.ReadBundle(filepath.Join(dir, f))
		if err != nil {
			return opts, err
		}
		opts.ToolDefinitions = append(opts.ToolDefinitions, b)
	}
	if c.Inputs.Log != "" {
		if opts.Log, err = OpenFileCopy(filepath.Join(dir, c.Inputs.Log)); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

func readFile(path string) ([]byte, error) {
	return receipt.ReadFileCapped(path, receipt.MaxBundleSize)
}
