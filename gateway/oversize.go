package gateway

import (
	"context"
	"encoding/json"
	"log/slog"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// Oversize policies of a remote log (config log.oversize).
const (
	OversizeRefuse = "refuse" // default: a call whose receipt cannot fit is refused before forwarding
	OversizeHash   = "hash"   // such a call goes ahead and its receipt is logged by hash
)

// capLog is a remote log whose appends are capped (SPEC.md, Limits: an append body is
// at most 64 KB). A leaf that fits is appended whole; one that does not is appended by
// its hash (the log server takes either form on every append), and the bundle file in
// receiptsDir, written and fsynced before the call returns, is then the only full
// copy. The gateway refuses before forwarding a call whose receipt would not fit even
// without its result (unless log.oversize is "hash"), so the hash form is used only
// for a result that brought the receipt over the cap after the upstream had acted:
// that call still gets a receipt, never an "already happened" error.
type capLog struct {
	whole, byHash receipt.Log
	fits          func(leaf []byte) bool
	log           *slog.Logger
}

func (l *capLog) Append(ctx context.Context, leaf []byte) (*receipt.Proof, error) {
	if l.fits(leaf) {
		return l.whole.Append(ctx, leaf)
	}
	l.log.Info("receipt larger than the log's append cap: appended by its hash; the bundle file is the full copy", "bytes", len(leaf))
	return l.byHash.Append(ctx, leaf)
}

// httpAppendFits reports whether the append body {"leaf": <leaf as a JSON string>}
// is within the log server's cap.
func httpAppendFits(leaf []byte) bool {
	q, err := json.Marshal(string(leaf))
	return err == nil && len(`{"leaf":}`)+len(q) <= pipeline.MaxLeafBytes
}

// natsAppendFits reports whether a leaf is within the pipeline's cap.
func natsAppendFits(leaf []byte) bool { return len(leaf) <= pipeline.MaxLeafBytes }
