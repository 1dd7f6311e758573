package logservice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/sequencer"
	"svc.dev/svc/pipeline"
)

// The backoff of a broker-facing step that failed transiently: short at first, since
// an election takes seconds and every moment waited past it is a longer outage.
const (
	retryFirst = 100 * time.Millisecond
	retryMost  = 2 * time.Second
)

// Retry runs step until it succeeds, returns an error that is not a transient broker
// failure (pipeline.Transient), or ctx ends. A process started while the cluster has
// no quorum, or is electing the leader of a stream it needs ("JetStream system
// temporarily unavailable"), waits here instead of exiting: each failure is logged,
// counted (svc_broker_retries_total{loop="start: <what>"}) and handed to
// Config.Waiting, which `svc log` answers /health with until the service is up.
func (s *Service) Retry(ctx context.Context, what string, step func(context.Context) error) error {
	wait := retryFirst
	for {
		err := step(ctx)
		if err == nil || ctx.Err() != nil || !pipeline.Transient(err) {
			if err == nil {
				s.waiting(nil)
			}
			return err
		}
		s.cfg.Telemetry.BrokerRetry("start: " + what)
		s.cfg.Logger.Warn("the broker is not ready; retrying", "step", what, "err", err, "in", wait)
		s.waiting(fmt.Errorf("%s: %w", what, err))
		if err := client.Sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, retryMost)
	}
}

// waiting records what a retrying step waits for (nil: nothing any more) for
// /health, and reports it to Config.Waiting.
func (s *Service) waiting(err error) {
	if err == nil {
		s.failing.Store(nil)
	} else {
		s.failing.Store(&brokerFailure{err: err, at: time.Now()})
	}
	if s.cfg.Waiting != nil {
		s.cfg.Waiting(err)
	}
}

// superviseSequencer runs a file-mode tenant's sequencer until runCtx ends. A run
// the broker ends (a commit that found no stream leader for its whole patience, a
// recovery or a consumer creation while the cluster elects) is started again after
// a backoff, with the same tree: the process never stops for the broker. A fenced
// sequencer (another writer), a log of record shorter than the tree, and any other
// error are reported on failed and to Err.
func (s *Service) superviseSequencer(runCtx context.Context, seq *sequencer.Sequencer, tenant string, failed chan<- error) {
	wait := retryFirst
	for {
		began := time.Now()
		err := seq.Run(runCtx)
		switch {
		case err == nil || runCtx.Err() != nil:
			return
		case errors.Is(err, sequencer.ErrFenced) || errors.Is(err, sequencer.ErrShorterLog) || !pipeline.Transient(err):
			failed <- err
			s.report(fmt.Errorf("sequencer %s: %w", tenant, err))
			return
		}
		if time.Since(began) > time.Minute {
			wait = retryFirst
		}
		s.cfg.Telemetry.BrokerRetry("sequencer " + tenant)
		s.cfg.Logger.Warn("the sequencer stopped on a broker failure; restarting it", "tenant", tenant, "err", err, "in", wait)
		s.waiting(fmt.Errorf("sequencer %s: %w", tenant, err))
		if client.Sleep(runCtx, wait) != nil {
			return
		}
		wait = min(2*wait, retryMost)
	}
}

// frontResend is the HTTP front's pipeline.ClientConfig.ResendAfter: a request
// SVC_APPEND did not acknowledge (its leader lost, an election under way) is
// published again after half a second rather than the client's
// default second, so an append waits at most that long past SVC_APPEND's election.
const frontResend = 500 * time.Millisecond

// isolateAfter is how long the node this process is connected to may answer
// JetStream's account information with "temporarily unavailable" (it has no meta
// leader) before the process moves to another node. A node cut off from its peers
// answers pings but reaches no quorum for as long as the cut lasts; a meta leader's
// election after a crash (4-9 s) looks the same on every node for its duration, and
// a move then costs a reconnection and the re-issued pulls, well under a second.
const isolateAfter = 5 * time.Second

// watchNode moves the connection to another node of the cluster when the one it is
// on stays without a JetStream meta leader for isolateAfter: a node partitioned from
// its peers keeps its clients (it answers their pings), and every broker-facing loop
// of the process would wait for the partition to heal.
func (s *Service) watchNode(ctx context.Context, js jetstream.JetStream) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var since time.Time // the first failure of this streak
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if s.nc.Status() != nats.CONNECTED || len(s.nc.Servers()) < 2 {
			since = time.Time{}
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		switch {
		case err == nil || !pipeline.Transient(err):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= isolateAfter:
			s.cfg.Telemetry.BrokerRetry("node")
			s.cfg.Logger.Warn("the NATS node this process is connected to has had no JetStream quorum for a while; moving to another node",
				"node", s.nc.ConnectedServerName(), "for", time.Since(since).Round(time.Second), "err", err)
			if err := s.nc.ForceReconnect(); err != nil {
				s.cfg.Logger.Warn("reconnect failed", "err", err)
			}
			since = time.Time{}
		}
	}
}
