package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/exporters"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
	"svc.dev/svc/receipt"
)

func init() {
	register("exports", "see and repair receipt exports: status, dead letters, replay", runExports)
}

const exportsHelp = `Shows and repairs the receipt exports of a fleet whose receipts go through the
pipeline (SVC_RECEIPTS): each exporter (otel, splunk) is a durable consumer per tenant
that acknowledges a receipt only after its collector took it; a receipt the
collector refused for good is kept in SVC_DEAD.

  status                 per exporter: position in SVC_RECEIPTS, backlog, last error,
                         dead letters; with --db-env also the database projections
                         (projection-admin, projection-leaves: position, backlog, dead
                         letters)
  dead list              the receipts in SVC_DEAD, with the handler, the error and the
                         attempts (--exporter to pick one)
  dead replay [--id N]   send dead letters again (all, or those named by their SVC_DEAD
                         sequence; --id repeats); each one its collector takes leaves
                         SVC_DEAD. Letters of the database projections
                         (projection-admin, projection-leaves: messages they could not
                         decode) are applied to the database of --db-env, once each
  replay                 send a period again to one collector (--exporter, --since an
                         RFC 3339 time or an SVC_RECEIPTS sequence), e.g. after it lost
                         data; the exporter's own position does not move

--config names the gateway or SDK config whose otel/splunk fields say where the
collectors are and whose log.nats and log.tenant say where the pipeline is; --nats-url
and --tenant override those.

Example:
  svc exports status --config gateway.json
  svc exports dead list --config gateway.json
  svc exports replay --config gateway.json --exporter splunk --since 2026-11-21T00:00:00Z`

// exportsFlags are the flags every exports subcommand takes.
type exportsFlags struct {
	config, tenant, tokenEnv, exporter, since, dbEnv *string
	nats                                             natsFlags
	ids                                              listFlag
	asJSON                                           *bool
}

func runExports(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var what []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") && len(what) < 2 {
		what, args = append(what, args[0]), args[1:]
	}
	name := "exports " + strings.Join(what, " ")
	fs := newFlagSet(strings.TrimSpace(name), "<status | dead list | dead replay | replay> --config <file> [flags]", exportsHelp, stderr)
	f := exportsFlags{
		config:   fs.String("config", "", "the gateway or SDK config `file` (its otel, splunk and log fields)"),
		tenant:   fs.String("tenant", "", "the `tenant` (default: the config's log.tenant, else default)"),
		tokenEnv: fs.String("token-env", "", "environment `variable` holding the NATS auth token (default: the config's log.tokenEnv)"),
		exporter: fs.String("exporter", "", "`name` of one exporter: otel or splunk (replay: required; dead list: a filter)"),
		since:    fs.String("since", "", "replay: from this RFC 3339 `time`, or from this SVC_RECEIPTS sequence"),
		asJSON:   fs.Bool("json", false, "status and dead list: print JSON"),
		dbEnv:    fs.String("db-env", "", "status and dead replay: environment `variable` holding the hosted log's PostgreSQL URL (the database projections)"),
	}
	f.nats.register(fs, "NATS `URL` of the pipeline (default: the config's log.nats)")
	fs.Var(&f.ids, "id", "dead replay: the SVC_DEAD `sequence` of a letter to send (repeatable; default all)")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	cmd := strings.Join(what, " ")
	switch cmd {
	case "status", "dead list", "dead replay", "replay":
	case "":
		return usagef("name what to do: status, dead list, dead replay or replay")
	default:
		return usagef("unknown exports command %q: want status, dead list, dead replay or replay", cmd)
	}
	x, err := openExports(ctx, f)
	if err != nil {
		return err
	}
	defer x.nc.Close()
	switch cmd {
	case "status":
		return x.status(ctx, stdout, *f.asJSON, *f.dbEnv)
	case "dead list":
		return x.deadList(ctx, stdout, *f.exporter, *f.asJSON)
	case "dead replay":
		return x.deadReplay(ctx, stdout, stderr, f.ids, *f.dbEnv)
	default:
		return x.replay(ctx, stdout, stderr, *f.exporter, *f.since)
	}
}

// exportsEnv is a connection to the pipeline and the exporters of one config.
type exportsEnv struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	tenant string
	exps   []exporters.Exporter
}

// exportsConfig is what exports reads of a gateway or SDK config; other fields are
// ignored.
type exportsConfig struct {
	Log *struct {
		NATS     string `json:"nats"`
		Tenant   string `json:"tenant"`
		TokenEnv string `json:"tokenEnv"`
	} `json:"log"`
	exporters.Config
}

func openExports(ctx context.Context, f exportsFlags) (*exportsEnv, error) {
	if *f.config == "" {
		return nil, usagef("--config is required: the gateway or SDK config that names the collectors")
	}
	data, err := receipt.ReadFileCapped(*f.config, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var cfg exportsConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("--config %s: %w", *f.config, err)
	}
	url, tenant, tokenEnv := f.nats.url, *f.tenant, *f.tokenEnv
	if cfg.Log != nil {
		url, tenant, tokenEnv = or(url, cfg.Log.NATS), or(tenant, cfg.Log.Tenant), or(tokenEnv, cfg.Log.TokenEnv)
	}
	tenant = or(tenant, client.DefaultTenant)
	if url == "" {
		return nil, usagef("no pipeline: the config has no log.nats; give --nats-url")
	}
	if !client.ValidTenant(tenant) {
		return nil, usagef("--tenant %q is not a tenant id", tenant)
	}
	exps, err := exporters.Build(cfg.Config, &http.Client{}, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", *f.config, err)
	}
	creds := f.nats.credentials()
	creds.URL = url
	if tokenEnv != "" {
		tok, ok := os.LookupEnv(tokenEnv)
		if !ok {
			return nil, fmt.Errorf("environment variable %s (the NATS token) is not set", tokenEnv)
		}
		creds.Token = tok
	}
	nc, err := pipeline.Connect(creds, "svc-exports")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &exportsEnv{nc: nc, js: js, tenant: tenant, exps: exps}, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (x *exportsEnv) names() []string {
	var n []string
	for _, e := range x.exps {
		n = append(n, e.Name())
	}
	if len(n) == 0 {
		n = exporters.Kinds()
	}
	return n
}

func (x *exportsEnv) status(ctx context.Context, stdout io.Writer, asJSON bool, dbEnv string) error {
	st, err := exporters.Status(ctx, x.js, x.tenant, x.names())
	if err != nil {
		return err
	}
	if dbEnv != "" {
		db, err := openStore(ctx, dbEnv)
		if err != nil {
			return err
		}
		defer db.Close()
		ps, err := db.Status(ctx, x.js)
		if err != nil {
			return fmt.Errorf("database projections: %w", err)
		}
		st = append(st, ps...)
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(st)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "exporter\ttenant\tposition\tbacklog\tdead letters\tlast error")
	for _, s := range st {
		last := "-"
		if s.LastError != "" {
			last = s.LastError
			if !s.LastErrorAt.IsZero() {
				last = s.LastErrorAt.Format(time.RFC3339) + " " + last
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", s.Exporter, s.Tenant, s.Position, s.Backlog, s.DeadLetters, last)
	}
	return tw.Flush()
}

func (x *exportsEnv) deadList(ctx context.Context, stdout io.Writer, exporter string, asJSON bool) error {
	letters, err := consume.ListDead(ctx, x.js, exporter)
	if err != nil {
		return err
	}
	if asJSON {
		if letters == nil {
			letters = []consume.DeadLetter{}
		}
		return json.NewEncoder(stdout).Encode(letters)
	}
	if len(letters) == 0 {
		fmt.Fprintln(stdout, "no dead letters")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\thandler\ttenant\treceipt\tattempts\tat\terror")
	for _, l := range letters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", l.Seq, l.Handler, l.Tenant, l.ReceiptID, l.Attempts, l.At.Format(time.RFC3339), l.Error)
	}
	return tw.Flush()
}

func (x *exportsEnv) deadReplay(ctx context.Context, stdout, stderr io.Writer, ids []string, dbEnv string) error {
	var seqs []uint64
	for _, s := range ids {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return usagef("--id %q: want the SVC_DEAD sequence `svc exports dead list` shows", s)
		}
		seqs = append(seqs, n)
	}
	handlers := exporters.DeadHandlers(x.exps)
	if dbEnv != "" {
		st, err := openStore(ctx, dbEnv)
		if err != nil {
			return err
		}
		defer st.Close()
		handlers = append(handlers, st.DeadHandlers()...)
	}
	n, err := consume.ReplayDead(ctx, x.js, seqs, func(done, total int) {
		fmt.Fprintf(stderr, "\rdead letters: %d of %d", done, total)
	}, handlers...)
	fmt.Fprintln(stderr)
	fmt.Fprintf(stdout, "delivered %d dead letters\n", n)
	if err != nil {
		return fmt.Errorf("some letters stay in %s: %w", consume.DeadStream, err)
	}
	return nil
}

func (x *exportsEnv) replay(ctx context.Context, stdout, stderr io.Writer, exporter, since string) error {
	var e exporters.Exporter
	for _, c := range x.exps {
		if c.Name() == exporter {
			e = c
		}
	}
	if e == nil {
		return usagef("--exporter %q: the config configures %v", exporter, x.names())
	}
	var from exporters.Since
	if t, err := receipt.ParseTime(since); err == nil {
		from.Time = t
	} else if n, err := strconv.ParseUint(since, 10, 64); err == nil && n > 0 {
		from.Seq = n
	} else {
		return usagef("--since %q: want an RFC 3339 time (2026-11-21T00:00:00Z) or an SVC_RECEIPTS sequence", since)
	}
	res, err := exporters.Replay(ctx, x.js, x.tenant, e, from, exporters.QueueConfig{}, func(done, total int) {
		fmt.Fprintf(stderr, "\rreplay to %s: %d of %d", exporter, done, total)
	})
	fmt.Fprintln(stderr)
	if res != nil {
		fmt.Fprintf(stdout, "sent %d receipts of tenant %s to %s again", res.Sent, x.tenant, exporter)
		if len(res.Refused) > 0 {
			fmt.Fprintf(stdout, "; %d refused for good: %s", len(res.Refused), strings.Join(res.Refused, "; "))
		}
		fmt.Fprintln(stdout)
	}
	return err
}
