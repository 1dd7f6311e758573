package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/admin"
	"svc.dev/svc/internal/logimport"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/tenancy"
)

func init() {
	register("log-admin", "administer the database-backed log: tenants, tokens, plans, audit, import", runLogAdmin)
}

const logAdminHelp = `Administers the database-backed log (svc log --db-env). Changes are administrative
events on the broker (SVC_ADMIN), the source of truth every log server process folds, so
they take effect on every process at once; reads come from the same events and from
PostgreSQL. The audit trail records them with actor <user>@<host>.

Commands:
  tenant add <id> [--log-id <id>]        create a tenant (free plan); the broker keeps ids unique.
                                         An id is 1 to 63 of a-z, 0-9, - and _, starting with a
                                         letter or digit (self-registration in the portal is
                                         stricter: 3 to 40 of a-z, 0-9 and -)
  tenant list                            tenants with plan, usage this month against quota, live tokens
  tenant disable <id>                    refuse the tenant's appends from now on
  tenant plan <id> <free|team|enterprise>
  tenant public <id> <on|off>            opt the tenant's log public (its C2SP entry bundles
                                         served without a token) or back private; checkpoints
                                         and hash tiles are public either way
  token add <tenant> --label <label>     print a new token once (only its hash is kept)
  token list [<tenant>]                  tokens by label and 12-hex hash prefix
  token revoke <tenant> <hash prefix>
  audit [--tenant <id>] [--limit N]      newest first
  import --file <log file> [--tenant default]
                                         stream a SPEC log file into a tenant, with progress,
                                         and check that the imported root equals the file's

It reaches the broker of the running log servers at --nats-url (run svc log with
--nats-url, or --nats-listen for its embedded broker).
` + natsCredentialsHelp + `
Example:
  SVC_DATABASE_URL=postgres://svc@db/svc svc log-admin --db-env SVC_DATABASE_URL \
    --nats-url nats://127.0.0.1:4222 --nats-nkey data/nats.nk tenant add acme --log-id log.example.com/acme
  svc log-admin --db-env SVC_DATABASE_URL --nats-url nats://127.0.0.1:4222 --nats-nkey data/nats.nk \
    --public-url https://log.example.com token add acme --label ci`

type logAdminOptions struct {
	controlPlaneFlags
	logID, label, tenant string
	file, month          string
	publicURL            string
	limit                int
}

func runLogAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("log-admin", "--db-env <ENV> --nats-url <URL> <command> [args] [flags]", logAdminHelp, stderr)
	var o logAdminOptions
	o.controlPlaneFlags.register(fs, "environment `variable` holding the PostgreSQL URL (required)")
	fs.StringVar(&o.logID, "log-id", "", "tenant add: the tenant's log `id`, named in its heads")
	fs.StringVar(&o.label, "label", "", "token add: the token's `label`")
	fs.StringVar(&o.tenant, "tenant", "", "audit: only this `tenant`; import: the tenant to import into (default \"default\")")
	fs.StringVar(&o.publicURL, "public-url", "", "token add: the log's public base `URL`, to print a ready curl line with the new token")
	fs.IntVar(&o.limit, "limit", 50, "audit: at most `N` entries")
	fs.StringVar(&o.file, "file", "", "import: the SPEC log `file`")
	fs.StringVar(&o.month, "month", "", "tenant list: the `month` (YYYY-MM) whose usage to show; default this month")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("name a command: tenant, token, audit or import (svc log-admin --help)")
	}
	if o.dbEnv == "" || o.nats.url == "" {
		return usagef("--db-env and --nats-url are required")
	}
	cp, err := o.attach(ctx, "svc-log-admin", nil, nil)
	if err != nil {
		return err
	}
	defer cp.Close()
	a := &logAdmin{o: o, st: cp.st, nc: cp.nc, js: cp.js, view: cp.view, adm: &tenancy.Admin{JS: cp.js, View: cp.view}, actor: commandLineActor(), out: stdout, errOut: stderr}
	return a.run(ctx, pos)
}

type logAdmin struct {
	o           logAdminOptions
	st          *store.Store
	nc          *nats.Conn
	js          jetstream.JetStream
	view        *tenancy.View
	adm         *tenancy.Admin
	actor       string
	out, errOut io.Writer
}

func (a *logAdmin) run(ctx context.Context, pos []string) error {
	want := func(n int, usage string) error {
		if len(pos) != n {
			return usagef("usage: svc log-admin %s", usage)
		}
		return nil
	}
	cmd := strings.Join(pos[:min(2, len(pos))], " ")
	switch {
	case cmd == "tenant add":
		if err := want(3, "tenant add <id> [--log-id <id>]"); err != nil {
			return err
		}
		t, err := a.adm.AddTenant(ctx, a.actor, pos[2], a.o.logID)
		if err != nil {
			return hint(err)
		}
		pub := ""
		if a.o.publicURL != "" {
			pub = " --public-url " + shellWord(a.o.publicURL)
		}
		fmt.Fprintf(a.out, "tenant %s added (plan %s)\nnext, its first token:\n  %s log-admin --db-env %s %s%s token add %s --label first\n",
			t.ID, t.Plan, selfCommand(), shellWord(a.o.dbEnv), a.o.nats.words(), pub, t.ID)
		return nil
	case cmd == "tenant list":
		return a.tenantList(ctx)
	case cmd == "tenant disable":
		if err := want(3, "tenant disable <id>"); err != nil {
			return err
		}
		if _, err := a.adm.DisableTenant(ctx, a.actor, pos[2]); err != nil {
			return hint(err)
		}
		fmt.Fprintf(a.out, "tenant %s disabled: its appends are refused from now on\n", pos[2])
		return nil
	case cmd == "tenant plan":
		if err := want(4, "tenant plan <id> <free|team|enterprise>"); err != nil {
			return err
		}
		t, err := a.adm.SetPlan(ctx, a.actor, pos[2], pos[3])
		if err != nil {
			return hint(err)
		}
		fmt.Fprintf(a.out, "tenant %s is on plan %s\n", t.ID, t.Plan)
		return nil
	case cmd == "tenant public":
		return a.tenantPublic(ctx, pos)
	case cmd == "token add":
		if err := want(3, "token add <tenant> --label <label>"); err != nil {
			return err
		}
		token, tok, err := a.adm.AddToken(ctx, a.actor, pos[2], a.o.label)
		if err != nil {
			return hint(err)
		}
		fmt.Fprintf(a.out, "%s\n", token)
		fmt.Fprintf(a.errOut, "token %s of %s (label %q); %s\n", tok.TokenHash, pos[2], tok.Label, admin.Welcome(a.o.publicURL, pos[2], token))
		return nil
	case cmd == "token list":
		return a.tokenList(pos[2:])
	case cmd == "token revoke":
		if err := want(4, "token revoke <tenant> <hash prefix>"); err != nil {
			return err
		}
		if _, err := a.adm.RevokeToken(ctx, a.actor, pos[2], pos[3]); err != nil {
			return hint(err)
		}
		fmt.Fprintf(a.out, "revoked token %s of %s\n", pos[3], pos[2])
		return nil
	case pos[0] == "audit":
		return a.audit(ctx)
	case pos[0] == "import":
		return a.importFile(ctx)
	}
	return usagef("unknown command %q (svc log-admin --help)", strings.Join(pos, " "))
}

// tenantPublic is "tenant public <id> <on|off>": the tenant opts its log public (its
// C2SP entry bundles served without a token) or back private.
func (a *logAdmin) tenantPublic(ctx context.Context, pos []string) error {
	if len(pos) != 4 || (pos[3] != "on" && pos[3] != "off") {
		return usagef("want: tenant public <id> <on|off>")
	}
	t, err := a.adm.SetPublic(ctx, a.actor, pos[2], pos[3] == "on")
	if err != nil {
		return hint(err)
	}
	if t.Public {
		fmt.Fprintf(a.out, "tenant %s's log is public: its entry bundles need no token (checkpoints and hash tiles never do)\n", t.ID)
	} else {
		fmt.Fprintf(a.out, "tenant %s's log is private: its entry bundles need one of its tokens (checkpoints and hash tiles stay public)\n", t.ID)
	}
	return nil
}

// hint adds what to do next to an administrative error.
func hint(err error) error {
	switch {
	case errors.Is(err, tenancy.ErrNoTenant):
		return fmt.Errorf("%w (svc log-admin ... tenant list shows the tenants)", err)
	case errors.Is(err, tenancy.ErrNoToken):
		return fmt.Errorf("%w (svc log-admin ... token list <tenant> shows the hash prefixes)", err)
	}
	return err
}

func (a *logAdmin) tenantList(ctx context.Context) error {
	month := a.o.month
	if month == "" {
		month = time.Now().UTC().Format("2006-01")
	}
	usage, err := a.st.UsageByTenant(ctx, month)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(a.out, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "TENANT\tLOG ID\tPLAN\tSTATE\tAPPENDS %s\tQUOTA\tLEAVES\tLIVE TOKENS\n", month)
	for _, t := range a.view.Tenants() {
		state := "enabled"
		if t.Disabled {
			state = "disabled"
		}
		quota := "none"
		if n, ok := tenancy.Allowance(t.Plan); ok {
			quota = fmt.Sprint(n)
		}
		u := usage[t.ID]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\n", t.ID, orDash(t.LogID), t.Plan, state, u.Appends, quota, u.TotalLeaves, t.LiveTokens())
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *logAdmin) tokenList(args []string) error {
	tenants := a.view.Tenants()
	if len(args) == 1 {
		t, ok := a.view.Tenant(args[0])
		if !ok {
			return hint(fmt.Errorf("%w: %q", tenancy.ErrNoTenant, args[0]))
		}
		tenants = []tenancy.Tenant{t}
	} else if len(args) > 1 {
		return usagef("usage: svc log-admin token list [<tenant>]")
	}
	tw := tabwriter.NewWriter(a.out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTOKEN HASH\tLABEL\tCREATED\tREVOKED")
	for _, t := range tenants {
		for _, k := range t.Tokens {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, k.TokenHash, k.Label, k.CreatedAt, orDash(k.RevokedAt))
		}
	}
	return tw.Flush()
}

func (a *logAdmin) audit(ctx context.Context) error {
	// The audit trail is a projection; bring it up to the stream first.
	fctx, cancel := context.WithCancel(ctx)
	err := a.st.FollowAdmin(fctx, a.js, cancel)
	cancel()
	if err != nil {
		return err
	}
	entries, err := a.st.Audit(ctx, a.o.tenant, max(1, min(a.o.limit, 10000)))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(a.out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tTENANT\tACTION\tACTOR\tDETAIL")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.At, e.TenantID, e.Action, e.Actor, e.Detail)
	}
	return tw.Flush()
}

func (a *logAdmin) importFile(ctx context.Context) error {
	if a.o.file == "" {
		return usagef("import: --file is required")
	}
	tenant := a.o.tenant
	if tenant == "" {
		tenant = "default"
	}
	t, ok := a.view.Tenant(tenant)
	if !ok {
		return hint(fmt.Errorf("%w: %q", tenancy.ErrNoTenant, tenant))
	}
	hashes, err := logimport.Check(a.o.file)
	if err != nil {
		return err
	}
	if allow, limited := tenancy.Allowance(t.Plan); limited && uint64(len(hashes)) > allow {
		return fmt.Errorf("the file holds %d leaves, more than plan %s allows in a month (%d); imported leaves count as appends: move %s to a larger plan first (svc log-admin ... tenant plan %s enterprise)", len(hashes), t.Plan, allow, tenant, tenant)
	}
	fi, _ := os.Stat(a.o.file)
	start := time.Now()
	total := uint64(len(hashes))
	res, err := logimport.Import(ctx, a.nc, tenant, a.o.file, func(leaves, bytes uint64) {
		pct := float64(leaves) / float64(total)
		bar := strings.Repeat("#", int(pct*30)) + strings.Repeat(".", 30-int(pct*30))
		fmt.Fprintf(a.errOut, "\r  import %s [%s] %5.1f%%  %d/%d leaves  %.0f leaves/s", tenant, bar, 100*pct, leaves, total, float64(leaves)/time.Since(start).Seconds())
	})
	fmt.Fprintln(a.errOut)
	if err != nil {
		return err
	}
	size := int64(0)
	if fi != nil {
		size = fi.Size()
	}
	took := time.Since(start)
	fmt.Fprintf(a.out, "imported %d leaves (%d bytes) into %s in %s (%.0f leaves/s); root %s equals the file's\n",
		res.Leaves, size, tenant, took.Round(time.Millisecond), float64(res.Leaves)/took.Seconds(), res.RootHash)
	return nil
}
