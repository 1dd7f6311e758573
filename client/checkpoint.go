package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// MaxCheckpointSize caps a checkpoint document read from outside (one envelope, a few
// signatures).
const MaxCheckpointSize = 1 << 20

// LatestFile is the name of the latest checkpoint under <dir>/<tenant>/, for a log's
// checkpoint directory and a witness's output alike.
const LatestFile = "latest.json"

// CheckpointURL is the address of tenant's published checkpoint at tree size size
// under base, a log's checkpoints host or a witness's output (SPEC.md):
// <base>/<tenant>/<size>.json.
func CheckpointURL(base, tenant string, size uint64) string {
	return checkpointURL(base, tenant, strconv.FormatUint(size, 10)+".json")
}

// LatestCheckpointURL is the address of tenant's latest published checkpoint under
// base: <base>/<tenant>/latest.json.
func LatestCheckpointURL(base, tenant string) string {
	return checkpointURL(base, tenant, LatestFile)
}

func checkpointURL(base, tenant, file string) string {
	return strings.TrimRight(base, "/") + "/" + url.PathEscape(tenant) + "/" + file
}

// CheckpointFile is the file form of a published checkpoint,
// <dir>/<tenant>/<treeSize>.json and <dir>/<tenant>/latest.json.
type CheckpointFile struct {
	Tenant   string            `json:"tenant"`
	LogID    string            `json:"logId"`
	TreeSize uint64            `json:"treeSize"`
	RootHash string            `json:"rootHash"`
	SignedAt string            `json:"signedAt"`
	Envelope *receipt.Envelope `json:"envelope"`
}

// Checkpoint is a parsed checkpoint in SPEC.md's file form ({tenant, logId, treeSize,
// rootHash, signedAt, envelope}) or API form ({treeSize, rootHash, signedAt,
// treeHead}), with its signed payload decoded. The unsigned fields are checked
// against the signed payload, so a reader can trust them once the envelope verifies.
type Checkpoint struct {
	File CheckpointFile    // the file form (Tenant is empty for the API form)
	Head *receipt.TreeHead // the signed payload
}

// checkpointJSON reads either form; the envelope is kept raw so that it is parsed
// with receipt.ParseEnvelope's strict rules.
type checkpointJSON struct {
	Tenant   string          `json:"tenant"`
	LogID    string          `json:"logId"`
	TreeSize *uint64         `json:"treeSize"`
	RootHash string          `json:"rootHash"`
	SignedAt string          `json:"signedAt"`
	Envelope json.RawMessage `json:"envelope"`
	TreeHead json.RawMessage `json:"treeHead"`
}

// ParseCheckpoint parses a checkpoint in either form. It checks that the envelope is a
// well-formed tree head whose signed treeSize, rootHash and log agree with the
// unsigned fields, and that signedAt is an RFC 3339 time. It checks no signature.
func ParseCheckpoint(data []byte) (*Checkpoint, error) {
	if len(data) > MaxCheckpointSize {
		return nil, fmt.Errorf("checkpoint is %d bytes; the limit is %d", len(data), MaxCheckpointSize)
	}
	var c checkpointJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if dec.More() {
		return nil, errors.New("checkpoint: trailing data after the JSON value")
	}
	raw := c.Envelope
	switch {
	case len(raw) > 0 && len(c.TreeHead) > 0:
		return nil, errors.New("checkpoint: both envelope and treeHead")
	case len(raw) == 0:
		raw = c.TreeHead
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("checkpoint: no envelope")
	}
	if c.TreeSize == nil {
		return nil, errors.New("checkpoint: no treeSize")
	}
	env, err := receipt.ParseEnvelope(raw)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	th, err := receipt.DecodeTreeHead(env)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	switch {
	case th.TreeSize != *c.TreeSize:
		return nil, fmt.Errorf("checkpoint: treeSize %d, but the signed head says %d", *c.TreeSize, th.TreeSize)
	case th.RootHash != c.RootHash:
		return nil, fmt.Errorf("checkpoint: rootHash %q, but the signed head says %s", c.RootHash, th.RootHash)
	case c.LogID != "" && th.Log != c.LogID:
		return nil, fmt.Errorf("checkpoint: logId %q, but the signed head names log %q", c.LogID, th.Log)
	case c.Tenant != "" && !ValidTenant(c.Tenant):
		return nil, fmt.Errorf("checkpoint: tenant %q is not a valid tenant id", c.Tenant)
	}
	if _, err := receipt.ParseTime(c.SignedAt); err != nil {
		return nil, fmt.Errorf("checkpoint: signedAt: %w", err)
	}
	return &Checkpoint{
		File: CheckpointFile{Tenant: c.Tenant, LogID: th.Log, TreeSize: th.TreeSize, RootHash: th.RootHash, SignedAt: c.SignedAt, Envelope: env},
		Head: th,
	}, nil
}

// Root is the checkpoint's root hash.
func (c *Checkpoint) Root() merkle.Hash {
	h, _ := merkle.ParseHash(c.Head.RootHash) // checked by DecodeTreeHead
	return h
}
