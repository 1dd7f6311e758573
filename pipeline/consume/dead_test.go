package consume_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline/consume"
)

// handler is a DeadHandler that refuses until ok is set and records what it took.
type handler struct {
	name  string
	ok    bool
	taken [][]byte
}

func (h *handler) Handler() string { return h.name }
func (h *handler) ReplayLetter(_ context.Context, _ consume.DeadLetter, payload []byte) error {
	if !h.ok {
		return errors.New("still refused")
	}
	h.taken = append(h.taken, payload)
	return nil
}

// TestDeadLetterKeptListedReplayed: Keep makes SVC_DEAD and stores the letter with
// its facts; ListDead and DeadCounts see it; ReplayDead leaves a letter its handler
// refuses again, names a handler nobody configured, and removes a letter once its
// handler took it.
func TestDeadLetterKeptListedReplayed(t *testing.T) {
	ctx := context.Background()
	_, js := testkit.BareBroker(t)()
	if n, err := consume.DeadCounts(ctx, js); err != nil || n != nil {
		t.Fatalf("DeadCounts before SVC_DEAD exists: %v, %v; want nil, nil", n, err)
	}
	refused := errors.New("refused for good")
	l := consume.DeadLetter{Handler: "otel", Tenant: "acme", ReceiptID: "r-1", Error: "bad\nrequest", Attempts: 2, SourceSeq: "7", At: time.Now()}
	if err := consume.Keep(ctx, js, l, []byte("the receipt"), 1, refused); err != nil {
		t.Fatal(err)
	}
	other := consume.DeadLetter{Handler: "projection-admin", Tenant: "admin", Error: "undecodable", Attempts: 1, SourceSeq: "9", At: time.Now()}
	if err := consume.Keep(ctx, js, other, []byte("{"), 0, refused); err != nil {
		t.Fatal(err)
	}
	letters, err := consume.ListDead(ctx, js, "otel")
	if err != nil || len(letters) != 1 {
		t.Fatalf("ListDead(otel): %v, %v; want one letter", letters, err)
	}
	got := letters[0]
	if got.Handler != "otel" || got.Tenant != "acme" || got.ReceiptID != "r-1" || got.Error != "bad request" || got.Attempts != 2 || got.SourceSeq != "7" {
		t.Fatalf("letter read back as %+v", got)
	}
	counts, err := consume.DeadCounts(ctx, js)
	if err != nil || counts[consume.DeadSubject("otel", "acme")] != 1 || counts[consume.DeadSubject("projection-admin", "admin")] != 1 {
		t.Fatalf("DeadCounts: %v, %v", counts, err)
	}

	h := &handler{name: "otel"}
	n, err := consume.ReplayDead(ctx, js, nil, nil, h)
	if n != 0 || err == nil || !strings.Contains(err.Error(), "still refused") || !strings.Contains(err.Error(), "no projection-admin handler is configured") {
		t.Fatalf("replay with a refusing handler and a missing one: %d, %v", n, err)
	}
	if all, _ := consume.ListDead(ctx, js, ""); len(all) != 2 {
		t.Fatalf("%d letters after a refused replay, want both kept", len(all))
	}
	h.ok = true
	if n, err := consume.ReplayDead(ctx, js, []uint64{got.Seq}, nil, h); n != 1 || err != nil {
		t.Fatalf("replay of letter %d: %d, %v", got.Seq, n, err)
	}
	if len(h.taken) != 1 || string(h.taken[0]) != "the receipt" {
		t.Fatalf("the handler took %q, want the letter's payload", h.taken)
	}
	if all, _ := consume.ListDead(ctx, js, ""); len(all) != 1 || all[0].Handler != "projection-admin" {
		t.Fatalf("letters left: %+v; want only the projection's", all)
	}
	if _, err := consume.ReplayDead(ctx, js, []uint64{got.Seq}, nil, h); err == nil || !strings.Contains(err.Error(), "no dead letter") {
		t.Fatalf("replay of a removed letter: %v", err)
	}
}

// TestStatsByName: Add creates a handler's counts on first use and Snapshot copies
// them.
func TestStatsByName(t *testing.T) {
	type counts struct{ ok, failed int }
	var s consume.Stats[counts]
	s.Add("a", func(c *counts) { c.ok++ })
	s.Add("a", func(c *counts) { c.ok++ })
	s.Add("b", func(c *counts) { c.failed++ })
	snap := s.Snapshot()
	s.Add("a", func(c *counts) { c.ok++ })
	if snap["a"] != (counts{ok: 2}) || snap["b"] != (counts{failed: 1}) || len(snap) != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
}
