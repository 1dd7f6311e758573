package sequencer

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// Answering a committed batch: each request its proof and the signed head, bundles
// their entries' indices, and the replies' JSON written directly.

// answer signs one head for the tree as it now stands and answers every request with
// its own inclusion proof against it: a single request with its own reply, a bundle
// with one reply holding each of its leaves' answers.
func (s *Sequencer) answer(ctx context.Context, reqs []request, bundles []bundle) error {
	size := s.tree.Size()
	var headJSON []byte
	needHead := false
	for _, r := range reqs {
		if r.reply == nil {
			needHead = true
		}
	}
	if needHead {
		// A clock stepped back (NTP) never makes a head older than the one before.
		stamp := s.cfg.Now()
		if stamp.Before(s.lastStamp) {
			stamp = s.lastStamp
		}
		// The sequencer is the tree's only writer, so the head signed is of this size.
		head, th, err := receipt.SignHead(ctx, s.cfg.Signer, s.tree, s.cfg.Tenant, s.cfg.LogID, stamp)
		if err == nil && th.TreeSize != size {
			err = fmt.Errorf("the signed head has size %d, the tree %d", th.TreeSize, size)
		}
		if err != nil && ctx.Err() != nil {
			// Stopping: the leaves are committed; the requests, neither answered nor
			// acknowledged, are proven by the next start (its idempotency window).
			return fmt.Errorf("sequencer %s: stopped while signing: %w", s.cfg.Tenant, ctx.Err())
		}
		if err != nil {
			s.answerAll(reqs, bundles, &pipeline.Reply{Refusal: pipeline.Unavailable(fmt.Errorf("signer did not answer: %w", err))})
			return nil // the leaves are committed; retries are answered once the signer is back
		}
		s.lastStamp = stamp
		if headJSON, err = json.Marshal(head); err != nil {
			return err
		}
	}
	for i := range reqs {
		r := &reqs[i]
		if r.inbox == "" || r.bundle >= 0 {
			continue
		}
		var m *nats.Msg
		if r.reply != nil {
			var err error
			if m, err = r.reply.Encode(r.inbox); err != nil {
				return err
			}
		} else {
			proof, err := s.tree.InclusionProof(r.index, size)
			if err != nil {
				return err
			}
			m = nats.NewMsg(r.inbox)
			m.Header.Set(pipeline.HeaderStatus, pipeline.StatusOK)
			m.Data = proofReply(r.index, size, proof, headJSON)
		}
		if err := s.cfg.Conn.PublishMsg(m); err != nil {
			return err
		}
	}
	return s.answerBundles(reqs, bundles, size, headJSON)
}

// answerBundles sends each bundle its one reply.
func (s *Sequencer) answerBundles(reqs []request, bundles []bundle, size uint64, headJSON []byte) error {
	for _, b := range bundles {
		if b.inbox == "" {
			continue
		}
		m, err := s.bundleReply(reqs[b.first:b.first+b.count], b, size, headJSON)
		if err != nil {
			return err
		}
		if err := s.cfg.Conn.PublishMsg(m); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sequencer) bundleReply(reqs []request, b bundle, size uint64, headJSON []byte) (*nats.Msg, error) {
	if b.reply != nil {
		return b.reply.Encode(b.inbox)
	}
	answers := make([]pipeline.BundleAnswer, len(reqs))
	proven := false
	for i, r := range reqs {
		if r.reply != nil {
			answers[i].Refusal = r.reply.Refusal
			continue
		}
		proof, err := s.tree.InclusionProof(r.index, size)
		if err != nil {
			return nil, err
		}
		answers[i].Inclusion = inclusionJSON(nil, r.index, size, proof)
		proven = true
	}
	if !proven {
		headJSON = nil
	}
	return pipeline.EncodeBundleReply(b.inbox, headJSON, answers)
}

// answerAll refuses every request not answered yet with rep (a failed commit or
// signer), bundles included.
func (s *Sequencer) answerAll(reqs []request, bundles []bundle, rep *pipeline.Reply) {
	for i := range reqs {
		if reqs[i].reply == nil {
			reqs[i].reply = rep
		}
		if reqs[i].inbox == "" || reqs[i].bundle >= 0 {
			continue
		}
		if m, err := reqs[i].reply.Encode(reqs[i].inbox); err == nil {
			_ = s.cfg.Conn.PublishMsg(m)
		}
	}
	if err := s.answerBundles(reqs, bundles, 0, nil); err != nil {
		s.log.Warn("answering a bundle's refusal", "err", err)
	}
}

// proofReply writes {"inclusion":{...},"treeHead":<head>} without re-marshalling the
// head for every request of a batch.
func proofReply(index, size uint64, proof []merkle.Hash, headJSON []byte) []byte {
	b := make([]byte, 0, 96+len(proof)*67+len(headJSON))
	b = append(b, `{"inclusion":`...)
	b = inclusionJSON(b, index, size, proof)
	b = append(b, `,"treeHead":`...)
	b = append(b, headJSON...)
	return append(b, '}')
}

// inclusionJSON appends {"leafIndex":...,"treeSize":...,"hashes":[...]} to b.
func inclusionJSON(b []byte, index, size uint64, proof []merkle.Hash) []byte {
	if b == nil {
		b = make([]byte, 0, 64+len(proof)*67)
	}
	b = append(b, `{"leafIndex":`...)
	b = strconv.AppendUint(b, index, 10)
	b = append(b, `,"treeSize":`...)
	b = strconv.AppendUint(b, size, 10)
	b = append(b, `,"hashes":[`...)
	for i, h := range proof {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = hex.AppendEncode(b, h[:])
		b = append(b, '"')
	}
	return append(b, "]}"...)
}
