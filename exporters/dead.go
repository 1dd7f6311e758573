package exporters

import (
	"context"

	"svc.dev/svc/pipeline/consume"
)

// DeadHandlers are exps as the handlers consume.ReplayDead hands their dead letters
// to: each letter is the receipt as it was, delivered again to the exporter of its
// name.
func DeadHandlers(exps []Exporter) []consume.DeadHandler {
	out := make([]consume.DeadHandler, len(exps))
	for i, e := range exps {
		out[i] = deadHandler{e}
	}
	return out
}

type deadHandler struct{ e Exporter }

func (d deadHandler) Handler() string { return d.e.Name() }

// ReplayLetter delivers the letter's receipt again.
func (d deadHandler) ReplayLetter(ctx context.Context, _ consume.DeadLetter, payload []byte) error {
	return sendBundle(ctx, d.e, payload)
}

// sendBundle delivers one stored bundle to e.
func sendBundle(ctx context.Context, e Exporter, data []byte) error {
	r, err := decodeRecord(data)
	if err != nil {
		return err
	}
	return e.Send(ctx, []*Record{r})
}
