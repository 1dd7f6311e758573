package conformance

import (
	"encoding/json"
	"errors"
	"fmt"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Audit check names. The three of SPEC.md come after the two signature checks that its
// rule "both heads must be signed by a trusted key" implies.
const (
	CheckOlderSignature  = "older tree head signature"
	CheckNewerSignature  = "newer tree head signature"
	CheckOlderNotLarger  = "older is not larger than newer"
	CheckNewerExtends    = "newer log extends older log"
	CheckWitnessCosigned = "newer tree head countersigned by a witness"
)

// ConsistencySource proves that a tree of one size extends one of another: a log copy
// or a log server's /consistency route.
type ConsistencySource interface {
	Consistency(oldSize, newSize uint64) ([]merkle.Hash, error)
	Describe() string
}

// AuditOptions are the auditor's keys.
type AuditOptions struct {
	Keys        []signer.PublicKey // trusted head signers (log or issuer keys)
	LogID       string             // when set, both heads must name it
	WitnessKeys []signer.PublicKey // when set, the newer head must carry a witness signature
	// WitnessHead, when set, is the witness's countersigned checkpoint for the newer
	// head's size (fetched from a witness URL); it must state the same root.
	WitnessHead *receipt.Envelope
}

// Audit checks that newer extends older.
func Audit(older, newer *receipt.Envelope, src ConsistencySource, opts AuditOptions) *Report {
	r := &Report{}
	o := auditHead(r, CheckOlderSignature, older, opts)
	n := auditHead(r, CheckNewerSignature, newer, opts)
	if o == nil || n == nil {
		r.finish()
		return r
	}
	if r.add(CheckOlderNotLarger, o.TreeSize <= n.TreeSize, "older size %d, newer size %d", o.TreeSize, n.TreeSize) {
		err := extends(o, n, src)
		r.add(CheckNewerExtends, err == nil, "%s", errOr(err, fmt.Sprintf("consistency proof %d → %d from %s verifies", o.TreeSize, n.TreeSize, describe(src))))
	} else {
		r.add(CheckNewerExtends, false, "a log never shrinks")
	}
	if len(opts.WitnessKeys) > 0 {
		err := witnessed(newer, n, opts)
		r.add(CheckWitnessCosigned, err == nil, "%s", errOr(err, "countersigned"))
	}
	r.finish()
	return r
}

func describe(src ConsistencySource) string {
	if src == nil {
		return "nowhere"
	}
	return src.Describe()
}

func auditHead(r *Report, name string, env *receipt.Envelope, opts AuditOptions) *receipt.TreeHead {
	th, err := receipt.DecodeTreeHead(env)
	if err != nil {
		r.add(name, false, "%v", err)
		return nil
	}
	k, err := env.Verify(opts.Keys)
	if err == nil && opts.LogID != "" && th.Log != opts.LogID {
		err = fmt.Errorf("head names log %q, expected %q", th.Log, opts.LogID)
	}
	r.add(name, err == nil, "%s", errOr(err, fmt.Sprintf("size %d root %s signed by %s", th.TreeSize, short(th.RootHash), short(k.KeyID))))
	return th
}

func extends(o, n *receipt.TreeHead, src ConsistencySource) error {
	oldRoot, err := merkle.ParseHash(o.RootHash)
	if err != nil {
		return err
	}
	newRoot, err := merkle.ParseHash(n.RootHash)
	if err != nil {
		return err
	}
	if o.TreeSize == n.TreeSize {
		if oldRoot != newRoot {
			return fmt.Errorf("two different roots at size %d: the history was rewritten", o.TreeSize)
		}
		return nil
	}
	if src == nil {
		return errors.New("no log copy or log URL to prove consistency with")
	}
	proof, err := src.Consistency(o.TreeSize, n.TreeSize)
	if err != nil {
		return fmt.Errorf("%s: %w", src.Describe(), err)
	}
	if err := merkle.VerifyConsistency(o.TreeSize, n.TreeSize, oldRoot, newRoot, proof); err != nil {
		return fmt.Errorf("consistency proof %d → %d from %s does not verify: the newer log does not extend the older (%w)", o.TreeSize, n.TreeSize, src.Describe(), err)
	}
	return nil
}

func witnessed(newer *receipt.Envelope, n *receipt.TreeHead, opts AuditOptions) error {
	if ks := newer.VerifiedBy(opts.WitnessKeys); len(ks) > 0 {
		return nil
	}
	if opts.WitnessHead == nil {
		return errors.New("the newer head carries no signature by a trusted witness key")
	}
	w, err := receipt.DecodeTreeHead(opts.WitnessHead)
	if err != nil {
		return fmt.Errorf("witness checkpoint: %w", err)
	}
	if _, err := opts.WitnessHead.Verify(opts.WitnessKeys); err != nil {
		return fmt.Errorf("witness checkpoint at size %d: %w", w.TreeSize, err)
	}
	if w.TreeSize != n.TreeSize || w.RootHash != n.RootHash {
		return fmt.Errorf("the witness countersigned root %s at size %d; the newer head states %s", short(w.RootHash), w.TreeSize, short(n.RootHash))
	}
	return nil
}

// ReadHeadFile extracts a signed tree head from any file that carries one: a receipt
// bundle (its treeHead), a published checkpoint ({..., envelope}), an API checkpoint
// ({..., treeHead}), a /head answer ({treeHead}) or a bare envelope.
func ReadHeadFile(path string) (*receipt.Envelope, error) {
	data, err := receipt.ReadFileCapped(path, receipt.MaxBundleSize)
	if err != nil {
		return nil, err
	}
	env, err := ParseHead(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}

// ParseHead is ReadHeadFile on bytes.
func ParseHead(data []byte) (*receipt.Envelope, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	for _, key := range []string{"treeHead", "envelope"} {
		raw, ok := probe[key]
		if !ok {
			continue
		}
		env, err := receipt.ParseEnvelope(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if env.PayloadType == receipt.PayloadTreeHead {
			return env, nil
		}
	}
	if _, ok := probe["payloadType"]; ok {
		env, err := receipt.ParseEnvelope(data)
		if err != nil {
			return nil, err
		}
		if env.PayloadType == receipt.PayloadTreeHead {
			return env, nil
		}
	}
	return nil, errors.New("holds no signed tree head (want a bundle, a checkpoint or a tree head envelope)")
}
