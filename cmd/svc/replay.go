package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/sequencer"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func init() {
	register("replay", "rebuild a projection from the log of record", runReplay)
}

const replayHelp = `Rebuilds a projection from SVC_LEAVES, the log of record, with a progress bar. Run it
while the log server is stopped (it opens the same --data directory, or connects to
--nats-url).

Projections:
  logfile    writes the tenant's SPEC log file afresh to --out (which must not exist)
  metering   recounts appends per tenant and month (<data>/projections/metering.json)
  tree       rebuilds the tenant's tree store (<data>/tenants/<tenant>/tree)
  db         rebuilds the database of the hosted log (svc log --db-env) into the empty
             database of --db-env: tenants, tokens and the audit trail from SVC_ADMIN,
             monthly usage and log sizes from SVC_LEAVES (migrations applied first)

Checkpoints are signatures made at the time; they are not replayed.

Example:
  svc replay db --nats-url nats://127.0.0.1:4222 --db-env SVC_NEW_DATABASE_URL
  svc replay logfile --data ./data --tenant default --out rebuilt.jsonl`

// replayFlags are the flags of every `svc replay <projection>`.
type replayFlags struct {
	data, tenant, out, dbEnv string
	nats                     natsFlags
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs := newFlagSet("replay", "<logfile|metering|tree> [flags]", replayHelp, stderr)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fs.Usage()
			return nil
		}
		return usagef("name the projection: logfile, metering, tree or db")
	}
	what := args[0]
	var o replayFlags
	fs := newFlagSet("replay "+what, "[flags]", replayHelp, stderr)
	fs.StringVar(&o.data, "data", "data", "the log's data `directory`")
	o.nats.register(fs, "NATS `URL` of the cluster; default: the embedded server in --data")
	fs.StringVar(&o.tenant, "tenant", "default", "the `tenant` (logfile, tree)")
	fs.StringVar(&o.out, "out", "", "logfile: the `file` to write")
	fs.StringVar(&o.dbEnv, "db-env", "", "db: environment `variable` holding the URL of the empty PostgreSQL database to fill")
	if _, err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	nc, closeBroker, err := replayBroker(o.data, o.nats.credentials())
	if err != nil {
		return err
	}
	defer closeBroker()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	switch what {
	case "db":
		return replayDB(ctx, js, o.dbEnv, stdout, stderr)
	case "metering":
		return replayMetering(ctx, js, o.data, stderr)
	case "logfile":
		return replayLogFile(ctx, js, o, logger, stdout, stderr)
	case "tree":
		return replayTree(ctx, nc, o, logger, stdout, stderr)
	}
	return usagef("unknown projection %q: want logfile, metering, tree or db", what)
}

// replayBroker connects to the cluster at c.URL, or starts the embedded server of
// the data directory (which fails while the log server still runs on it).
func replayBroker(data string, c pipeline.Credentials) (*nats.Conn, func(), error) {
	if c.URL != "" {
		nc, err := pipeline.Connect(c, "svc-replay")
		if err != nil {
			return nil, nil, err
		}
		return nc, nc.Close, nil
	}
	if _, err := os.Stat(filepath.Join(data, "nats")); err != nil {
		return nil, nil, fmt.Errorf("%s holds no JetStream store (%w); point --data at the log's data directory", data, err)
	}
	srv, err := natsembed.Start(natsembed.Config{DataDir: data})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is the log server still running on %s? stop it first)", err, data)
	}
	nc, err := natsembed.Connect(srv, "svc-replay", pipeline.Credentials{})
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); srv.Shutdown() }, nil
}

// replayMetering recounts appends per tenant and month from the start of SVC_LEAVES.
func replayMetering(ctx context.Context, js jetstream.JetStream, data string, stderr io.Writer) error {
	path := filepath.Join(data, "projections", "metering.json")
	if err := os.Remove(path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return err
	}
	target, err := projections.Target(ctx, js, pipeline.LeavesPrefix+">")
	if err != nil {
		return err
	}
	m := &projections.Metering{StatePath: path, JS: js}
	if err := m.Load(); err != nil {
		return err
	}
	return replayUntil(ctx, stderr, "metering", target, m.Position, func(ctx context.Context) error { return m.Run(ctx) })
}

// replayLogFile writes the tenant's SPEC log file afresh to o.out.
func replayLogFile(ctx context.Context, js jetstream.JetStream, o replayFlags, logger *slog.Logger, stdout, stderr io.Writer) error {
	if o.out == "" {
		return usagef("logfile: --out is required")
	}
	if _, err := os.Stat(o.out); err == nil {
		return fmt.Errorf("%s exists; replay writes a new file", o.out)
	}
	target, err := projections.Target(ctx, js, pipeline.LeavesSubject(o.tenant))
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "svc-replay-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	var pos atomic.Uint64
	p := &projections.LogFile{Path: o.out, StatePath: filepath.Join(state, "state.json"), Tenant: o.tenant, JS: js, Logger: logger}
	p.OnBatch = func(seq uint64) { pos.Store(seq) }
	err = replayUntil(ctx, stderr, "logfile", target, pos.Load, func(ctx context.Context) error { return p.Run(ctx) })
	if err == nil {
		fmt.Fprintf(stdout, "wrote %s\n", o.out)
	}
	return err
}

// replayTree rebuilds the tenant's tree store by the sequencer's own recovery.
func replayTree(ctx context.Context, nc *nats.Conn, o replayFlags, logger *slog.Logger, stdout, stderr io.Writer) error {
	dir := filepath.Join(o.data, "tenants", o.tenant)
	if err := os.RemoveAll(filepath.Join(dir, "tree")); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "state.json"))
	key, _ := signer.GenerateKey() // signs nothing that leaves this command
	seq, err := sequencer.New(sequencer.Config{Tenant: o.tenant, Conn: nc, Dir: dir, Signer: receipt.KeySigner{Key: key}, Logger: logger})
	if err != nil {
		return err
	}
	defer seq.Close()
	start := time.Now()
	stop := progress(stderr, "tree", func() (uint64, uint64) { return seq.Tree().Size(), 0 })
	err = seq.Recover(ctx)
	stop()
	if err == nil {
		fmt.Fprintf(stdout, "rebuilt the tree of %s: %d leaves in %s\n", o.tenant, seq.Tree().Size(), time.Since(start).Round(time.Millisecond))
	}
	return err
}

// replayUntil runs a projection until its position reaches target, with progress.
func replayUntil(ctx context.Context, w io.Writer, name string, target uint64, pos func() uint64, run func(context.Context) error) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- run(rctx) }()
	stop := progress(w, name, func() (uint64, uint64) { return pos(), target })
	defer stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if pos() >= target {
			cancel()
			return <-errc
		}
		select {
		case err := <-errc:
			if err == nil && pos() < target {
				err = fmt.Errorf("%s stopped at stream sequence %d of %d", name, pos(), target)
			}
			return err
		case <-t.C:
		}
	}
}

// progress prints a progress bar to w until stop is called.
func progress(w io.Writer, name string, at func() (done, total uint64)) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	draw := func() {
		done, total := at()
		if total == 0 {
			fmt.Fprintf(w, "\r  replay %-9s %12d", name, done)
			return
		}
		pct := float64(done) / float64(total)
		bar := strings.Repeat("#", int(pct*30)) + strings.Repeat(".", 30-int(pct*30))
		fmt.Fprintf(w, "\r  replay %-9s [%s] %5.1f%%  %d/%d", name, bar, 100*pct, done, total)
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				draw()
				fmt.Fprintln(w)
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// replayDB rebuilds the hosted log's database into an empty one.
func replayDB(ctx context.Context, js jetstream.JetStream, dbEnv string, stdout, stderr io.Writer) error {
	if dbEnv == "" {
		return usagef("db: --db-env is required")
	}
	st, err := openStore(ctx, dbEnv)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, name := range []string{"admin", "leaves"} {
		if pos, err := st.Position(ctx, name); err != nil {
			return err
		} else if pos != 0 {
			return fmt.Errorf("the database of %s already holds projections (%s at stream sequence %d); replay rebuilds into an empty database: create one and point --db-env at it", dbEnv, name, pos)
		}
	}
	start := time.Now()
	if err := st.Rebuild(ctx, js, func(name string) {
		fmt.Fprintf(stderr, "  replay db: %s caught up (%s)\n", name, time.Since(start).Round(time.Millisecond))
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebuilt the database of %s in %s\n", dbEnv, time.Since(start).Round(time.Millisecond))
	return nil
}
