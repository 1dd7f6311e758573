package sequencer

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
)

// Recovery: the tree caught up with the log of record (replayed from the tree
// store's size, its first batches by message gets), and adopting the tenant's
// consumer.

// recover brings the tree store up to the last committed batch.
func (s *Sequencer) recover(ctx context.Context) error {
	last, err := s.stream.GetLastMsgForSubject(ctx, s.subject)
	var streamSize uint64
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		s.lastSeq, last = 0, nil
	case err != nil:
		return fmt.Errorf("sequencer %s: read last batch: %w", s.cfg.Tenant, err)
	default:
		first, e1 := strconv.ParseUint(last.Header.Get(pipeline.HeaderFirst), 10, 64)
		count, e2 := strconv.ParseUint(last.Header.Get(pipeline.HeaderCount), 10, 64)
		if e1 != nil || e2 != nil {
			return fmt.Errorf("sequencer %s: last batch (seq %d) lacks %s/%s headers", s.cfg.Tenant, last.Sequence, pipeline.HeaderFirst, pipeline.HeaderCount)
		}
		s.lastSeq, streamSize = last.Sequence, first+count
	}
	if sd, ok := s.cfg.Admit.(Seeder); ok {
		sd.Seed(s.cfg.Tenant, last)
	}
	size := s.tree.Size()
	if size > streamSize {
		return fmt.Errorf("%w: sequencer %s: the tree store under %s holds %d leaves but the log of record holds %d; find out which is right before removing that directory to rebuild it from the stream", ErrShorterLog, s.cfg.Tenant, s.cfg.Dir, size, streamSize)
	}
	if size < streamSize {
		if err := s.replay(ctx, size, streamSize); err != nil {
			return err
		}
		s.replayed = streamSize - size
	}
	// Remember the latest leaves, so retries of leaves answered just before a
	// restart are recognised too. Producers retry within seconds, so the last
	// preloadLeaves suffice, and keep restarts fast.
	n := s.tree.Size()
	from := uint64(0)
	if keep := uint64(min(s.cfg.RecentLeaves, preloadLeaves)); n > keep {
		from = n - keep
	}
	for i := from; i < n; i++ {
		h, err := s.tree.LeafHash(i)
		if err != nil {
			return err
		}
		s.recent.add(h, i)
	}
	if st, ok := s.readState(); ok && s.replayed == 0 {
		// The file was written after a sync of the store up to what it records.
		s.synced = &st
	} else if !ok && s.tree.Size() == 0 && s.lastSeq == 0 {
		s.synced = &state{} // an empty log: nothing to record (replay starts at 1)
	}
	return nil
}

// replay appends the committed leaves [from, to) that the tree store lacks.
func (s *Sequencer) replay(ctx context.Context, from, to uint64) error {
	startSeq := uint64(1)
	if st, ok := s.readState(); ok && st.TreeSize <= from && st.StreamSeq > 0 {
		startSeq = st.StreamSeq + 1
	}
	s.log.Info("replaying committed leaves into the tree store", "from", from, "to", to, "startSeq", startSeq)
	// The first batches one message read each: a replay after a crash is mostly a
	// batch or two, and an ordered consumer's creation cost seconds on a loaded
	// cluster (10 s and more at a 3-node cluster's restart with 1,000 tenants).
	seq := startSeq
	for n := 0; n < replayByGet && s.tree.Size() < to; n++ {
		m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(s.subject))
		if err != nil {
			return fmt.Errorf("sequencer %s: replay at %d of %d leaves (stream seq %d on): %w", s.cfg.Tenant, s.tree.Size(), to, seq, err)
		}
		if err := s.replayBatch(m.Data, to); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	if s.tree.Size() >= to {
		return nil
	}
	it, done, err := pipeline.ReadFrom(ctx, s.stream, s.subject, pipeline.From{Seq: seq})
	if err != nil {
		return err
	}
	defer done()
	for s.tree.Size() < to {
		m, err := it.Next()
		if err != nil {
			return fmt.Errorf("sequencer %s: replay at %d of %d leaves: %w", s.cfg.Tenant, s.tree.Size(), to, err)
		}
		if err := s.replayBatch(m.Data(), to); err != nil {
			return err
		}
	}
	return nil
}

// replayByGet is how many batches a replay reads one by one before it takes an
// ordered consumer for the rest.
const replayByGet = 8

// replayBatch appends the leaves of a committed batch (data) the tree lacks, up to to.
func (s *Sequencer) replayBatch(data []byte, to uint64) error {
	b, err := pipeline.DecodeBatch(data)
	if err != nil {
		return fmt.Errorf("sequencer %s: replay: %w", s.cfg.Tenant, err)
	}
	size := s.tree.Size()
	end := min(b.First+uint64(len(b.Leaves)), to) // never past the batch recover read last
	if end <= size {
		return nil
	}
	if b.First > size {
		return fmt.Errorf("%w: sequencer %s: replay: batch starts at %d but the tree holds %d leaves: the stream has a gap", ErrShorterLog, s.cfg.Tenant, b.First, size)
	}
	for _, l := range b.Leaves[size-b.First : end-b.First] {
		if _, err := s.tree.Append(l.Hash); err != nil {
			return err
		}
	}
	return nil
}

// adopt commits the part of cfg.Adopt the log lacks, after checking the rest.
func (s *Sequencer) adopt(ctx context.Context) error {
	leaves := s.cfg.Adopt
	size := s.tree.Size()
	for i := uint64(0); i < min(size, uint64(len(leaves))); i++ {
		h, err := s.tree.LeafHash(i)
		if err != nil {
			return err
		}
		if h != leaves[i].Hash {
			return fmt.Errorf("sequencer %s: leaf %d of the adopted log file differs from the log of record; the file does not belong to this log", s.cfg.Tenant, i)
		}
	}
	if uint64(len(leaves)) <= size {
		s.cfg.Adopt = nil
		return nil
	}
	rest := leaves[size:]
	s.log.Info("adopting leaves from the log file", "from", size, "count", len(rest))
	for len(rest) > 0 {
		n, bytes := 0, 16
		for n < len(rest) && n < s.cfg.MaxBatch && bytes+len(rest[n].Data)+37 < pipeline.MaxBatchBytes {
			bytes += len(rest[n].Data) + 37
			n++
		}
		b := &pipeline.Batch{First: s.tree.Size(), Leaves: rest[:n]}
		if err := s.commit(ctx, b); err != nil {
			return err
		}
		hashes := make([]merkle.Hash, n)
		for i, l := range rest[:n] {
			hashes[i] = l.Hash
		}
		first, err := s.tree.AppendBatch(hashes)
		if err != nil {
			return err
		}
		for i, h := range hashes {
			s.recent.add(h, first+uint64(i))
		}
		rest = rest[n:]
	}
	s.cfg.Adopt = nil // done: a Run after a broker failure has nothing left to adopt
	return s.checkpoint()
}
