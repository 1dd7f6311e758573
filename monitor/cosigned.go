package monitor

import (
	"context"
	"errors"
	"fmt"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// CheckCosigned (svc log-check --policy): the tenant's C2SP checkpoint
// (<log-url>/t/<tenant>/checkpoint, read with no credential) is signed by the log and
// cosigned by the quorum of the policy's witnesses (C2SP tlog-policy), and the live
// log extends it.
const CheckCosigned = "checkpoint cosigned under policy"

// checkCosigned: CheckCosigned.
func (p *probe) checkCosigned(ctx context.Context, tenant string, src *client.LogServer, keys []signer.PublicKey, head *liveHead, headErr error) {
	data, err := client.Fetch(ctx, p.opts.Client, src.Base+"/checkpoint", client.MaxCheckpointSize, nil)
	if err != nil {
		p.add(tenant, CheckCosigned, fmt.Errorf("C2SP checkpoint: %w", err), "")
		return
	}
	c, err := p.opts.Policy.VerifyCheckpoint(data, keys)
	if err != nil {
		p.add(tenant, CheckCosigned, err, "")
		return
	}
	if headErr != nil {
		p.add(tenant, CheckCosigned, errors.New("no live head to prove the cosigned checkpoint against"), "")
		return
	}
	detail, err := consistent(src, &receipt.TreeHead{TreeSize: c.Size, RootHash: c.Root.String()}, head.th)
	if err == nil {
		detail = fmt.Sprintf("size %d cosigned by %s; %s", c.Size, c.Describe(), detail)
	}
	p.add(tenant, CheckCosigned, err, detail)
}
