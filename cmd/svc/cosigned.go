package main

import (
	"context"
	"fmt"
	"strings"

	"svc.dev/svc/client"
	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
	"svc.dev/svc/witness"
)

// Cosigned C2SP checkpoints under a witness policy (C2SP tlog-policy): svc verify
// --checkpoint <note> --policy <file> and svc log-check --policy <file>.

// maxPolicyFile caps a policy file.
const maxPolicyFile = 64 << 10

// loadPolicy reads a tlog-policy file.
func loadPolicy(path string) (*witness.Policy, error) {
	data, err := receipt.ReadFileCapped(path, maxPolicyFile)
	if err != nil {
		return nil, err
	}
	p, err := witness.ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("--policy %s: %w", path, err)
	}
	return p, nil
}

// readCheckpointText reads a checkpoint from a file or URL as bytes.
func readCheckpointText(ctx context.Context, where string) ([]byte, error) {
	if strings.HasPrefix(where, "https://") || strings.HasPrefix(where, "http://") {
		return client.Fetch(ctx, nil, where, client.MaxCheckpointSize, nil)
	}
	return receipt.ReadFileCapped(where, client.MaxCheckpointSize)
}

// loadCosignedCheckpoint is --checkpoint with --policy: the checkpoint is a C2SP
// signed note whose cosignatures must meet the policy's quorum.
func loadCosignedCheckpoint(ctx context.Context, where, policyPath string, opts *conformance.Options) error {
	p, err := loadPolicy(policyPath)
	if err != nil {
		return err
	}
	data, err := readCheckpointText(ctx, where)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", where, err)
	}
	c, err := p.VerifyCheckpoint(data, opts.LogKeys)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", where, err)
	}
	opts.Cosigned = &conformance.CosignedCheckpoint{TreeSize: c.Size, RootHash: c.Root.String(), By: c.Describe()}
	src, ok := opts.Log.(conformance.ConsistencySource)
	if !ok {
		return usagef("--checkpoint needs --log <file> or --log-url <url> to prove each head consistent with it")
	}
	opts.WitnessLog = src
	return nil
}
