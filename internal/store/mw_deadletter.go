package store

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
)

// mdSkip lists (comma-separated) the stream sequences of a group kept in SVC_DEAD.
const mdSkip = "svc_skip"

// deadLetterMiddleware keeps a message that cannot be decoded (a poisonError) in
// SVC_DEAD with the handler, the error and the attempts, marks it skipped and applies
// the group again without it, so the projection moves past it. If SVC_DEAD cannot
// take the letter (it is created, or updated, before each letter: poison is rare) the
// group fails (and is tried again): nothing is dropped unseen.
func deadLetterMiddleware(js jetstream.JetStream, name string, replicas int) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context() // Timeout below leaves msg with its ended context
			for {
				msg.SetContext(ctx)
				out, err := h(msg)
				var pe *poisonError
				if err == nil || !errors.As(err, &pe) {
					return out, err
				}
				m := findSeq(groupOf(msg), pe.seq)
				if m == nil {
					return nil, err
				}
				attempts, _ := strconv.Atoi(msg.Metadata.Get(mdAttempts))
				tenant := "admin"
				if name == HandlerLeaves {
					tenant = strings.TrimPrefix(m.Subject(), pipeline.LeavesPrefix)
				}
				letter := consume.DeadLetter{Handler: name, Tenant: tenant, Error: err.Error(), Attempts: max(attempts, 1),
					SourceSeq: strconv.FormatUint(pe.seq, 10), At: time.Now().UTC()}
				// SVC_DEAD is made when the first letter needs it, not at every start.
				if kerr := consume.Keep(ctx, js, letter, m.Data(), max(replicas, 1), err); kerr != nil {
					return nil, kerr
				}
				slog.Warn("projection message cannot be decoded, kept in "+consume.DeadStream, "handler", name, "seq", pe.seq, "error", pe.err)
				skip := msg.Metadata.Get(mdSkip)
				if skip != "" {
					skip += ","
				}
				msg.Metadata.Set(mdSkip, skip+strconv.FormatUint(pe.seq, 10))
			}
		}
	}
}

func findSeq(group []jetstream.Msg, seq uint64) jetstream.Msg {
	for _, m := range group {
		if seqOf(m) == seq {
			return m
		}
	}
	return nil
}

// skipped is the set of stream sequences the dead-letter middleware set aside.
func skipped(msg *message.Message) map[uint64]bool {
	v := msg.Metadata.Get(mdSkip)
	if v == "" {
		return nil
	}
	out := map[uint64]bool{}
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.ParseUint(f, 10, 64); err == nil {
			out[n] = true
		}
	}
	return out
}
