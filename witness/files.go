package witness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Size caps of the documents this package reads from outside.
const (
	MaxStateSize = 1 << 20
	MaxAlarmSize = 4 << 20
)

// File names under <out>/<tenant>/ and <out>/.
const (
	StateFile      = "state.json"
	AlarmFile      = "ALARM.json"
	KeyDocumentRel = ".well-known/svc-witness.json"
)

// State is what a witness remembers of a tenant's log: the last head it countersigned,
// <out>/<tenant>/state.json. It is written (atomically, fsynced) before the
// countersignature is published, and never moved by a checkpoint that raised an alarm.
type State struct {
	Tenant      string            `json:"tenant"`
	LogID       string            `json:"logId,omitempty"`
	TreeSize    uint64            `json:"treeSize"`
	RootHash    string            `json:"rootHash"`
	SignedAt    string            `json:"signedAt"`    // the checkpoint's signedAt
	WitnessedAt string            `json:"witnessedAt"` // when this witness countersigned it
	Envelope    *receipt.Envelope `json:"envelope"`    // the head as the log signed it
}

// ParseState parses and checks a witness state file: the envelope is a tree head that
// states the same size and root.
func ParseState(data []byte) (*State, error) {
	if len(data) > MaxStateSize {
		return nil, fmt.Errorf("witness state is %d bytes; the limit is %d", len(data), MaxStateSize)
	}
	var s struct {
		State
		Envelope json.RawMessage `json:"envelope"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("witness state: %w", err)
	}
	if dec.More() {
		return nil, errors.New("witness state: trailing data")
	}
	if !client.ValidTenant(s.Tenant) {
		return nil, fmt.Errorf("witness state: tenant %q is not a valid tenant id", s.Tenant)
	}
	if len(s.Envelope) == 0 || string(s.Envelope) == "null" {
		return nil, errors.New("witness state: no envelope")
	}
	env, err := receipt.ParseEnvelope(s.Envelope)
	if err != nil {
		return nil, fmt.Errorf("witness state: %w", err)
	}
	th, err := receipt.DecodeTreeHead(env)
	if err != nil {
		return nil, fmt.Errorf("witness state: %w", err)
	}
	if th.TreeSize != s.TreeSize || th.RootHash != s.RootHash || th.Log != s.LogID {
		return nil, fmt.Errorf("witness state: size %d root %s log %q, but its head says %d %s %q", s.TreeSize, s.RootHash, s.LogID, th.TreeSize, th.RootHash, th.Log)
	}
	if _, err := receipt.ParseTime(s.WitnessedAt); err != nil {
		return nil, fmt.Errorf("witness state: witnessedAt: %w", err)
	}
	out := s.State
	out.Envelope = env
	return &out, nil
}

// Alarm kinds: the three ways a log shows misbehaviour to a witness (SPEC.md,
// "Checkpoint and witness cycle").
const (
	// AlarmDoesNotExtend: the checkpoint's tree does not extend the last head the
	// witness signed (the consistency proof fails, or a smaller checkpoint is not a
	// prefix of it).
	AlarmDoesNotExtend = "does-not-extend"
	// AlarmSecondHistory: a checkpoint at the size the witness signed, with another root.
	AlarmSecondHistory = "second-history"
	// AlarmUnpublishedKey: the checkpoint is signed by a key the log's key document
	// does not list, and by no key it lists.
	AlarmUnpublishedKey = "unpublished-key"
)

// alarmSummaries are the SPEC.md phrases for the kinds.
var alarmSummaries = map[string]string{
	AlarmDoesNotExtend:  "a checkpoint that does not extend the last head this witness signed",
	AlarmSecondHistory:  "a second history at the same size",
	AlarmUnpublishedKey: "a signature by an unpublished key",
}

// HeadRef names a signed head in an alarm, with the envelope as evidence.
type HeadRef struct {
	TreeSize uint64            `json:"treeSize"`
	RootHash string            `json:"rootHash"`
	SignedAt string            `json:"signedAt,omitempty"`
	Envelope *receipt.Envelope `json:"envelope"`
}

// Proof is a consistency proof as the log answered it.
type Proof struct {
	OldSize uint64   `json:"oldSize"`
	NewSize uint64   `json:"newSize"`
	Hashes  []string `json:"hashes"`
}

// Evidence is what made the witness refuse.
type Evidence struct {
	Detail            string              `json:"detail"`
	Consistency       *Proof              `json:"consistency,omitempty"`
	UnpublishedKeyIDs []string            `json:"unpublishedKeyIds,omitempty"`
	KeyDocument       *signer.KeyDocument `json:"keyDocument,omitempty"`
}

// Alarm is the body of <out>/<tenant>/ALARM.json and ALARM-<time>.json.
type Alarm struct {
	Kind           string   `json:"kind"`
	Summary        string   `json:"summary"`
	Tenant         string   `json:"tenant"`
	LogURL         string   `json:"logUrl"`
	CheckpointsURL string   `json:"checkpointsUrl"`
	DetectedAt     string   `json:"detectedAt"`
	Witnessed      *HeadRef `json:"witnessed,omitempty"` // the last head this witness signed; absent before the first
	Offered        *HeadRef `json:"offered"`             // the checkpoint it refused
	Evidence       Evidence `json:"evidence"`
	WitnessKeyID   string   `json:"witnessKeyId"`
}

// ParseAlarm parses an alarm file.
func ParseAlarm(data []byte) (*Alarm, error) {
	if len(data) > MaxAlarmSize {
		return nil, fmt.Errorf("alarm is %d bytes; the limit is %d", len(data), MaxAlarmSize)
	}
	var a Alarm
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("alarm: %w", err)
	}
	if _, ok := alarmSummaries[a.Kind]; !ok {
		return nil, fmt.Errorf("alarm: unknown kind %q", a.Kind)
	}
	if a.Offered == nil {
		return nil, errors.New("alarm: no offered head")
	}
	return &a, nil
}

// same reports whether two alarms are about the same refusal (kind and heads), so a
// refusal that persists from cycle to cycle is recorded once.
func (a *Alarm) same(b *Alarm) bool {
	ref := func(h *HeadRef) string {
		if h == nil {
			return "-"
		}
		return fmt.Sprintf("%d/%s", h.TreeSize, h.RootHash)
	}
	return a.Kind == b.Kind && ref(a.Witnessed) == ref(b.Witnessed) && ref(a.Offered) == ref(b.Offered) &&
		slices.Equal(a.Evidence.UnpublishedKeyIDs, b.Evidence.UnpublishedKeyIDs)
}
