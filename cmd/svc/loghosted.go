package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"svc.dev/svc/internal/admin"
	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// envValue reads the environment variable a flag names.
func envValue(flagName, env, what string) (string, error) {
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return "", fmt.Errorf("environment variable %s (named by %s) is not set; set it to %s", env, flagName, what)
	}
	return v, nil
}

// openStore opens the database of --db-env, applying its migrations.
func openStore(ctx context.Context, dbEnv string) (*store.Store, error) {
	url, err := envValue("--db-env", dbEnv, "the PostgreSQL URL, e.g. postgres://user@host:5432/db")
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, url)
}

// startHosted starts the database-backed server of svc log --db-env: the log service
// in hosted mode, and the admin routes beside the log's.
func startHosted(ctx context.Context, o logOptions, headSigner receipt.EnvelopeSigner, keys func(context.Context) (*signer.KeyDocument, error), logger *slog.Logger, tel *telemetry.Telemetry) (*logservice.Service, http.Handler, error) {
	adminToken, err := envValue("--admin-token-env", o.adminTokenEnv, "the admin token")
	if err != nil {
		return nil, nil, err
	}
	if err := admin.CheckToken(adminToken); err != nil {
		return nil, nil, fmt.Errorf("%s (named by --admin-token-env): %w", o.adminTokenEnv, err)
	}
	listenPW, err := o.listenPassword()
	if err != nil {
		return nil, nil, err
	}
	st, err := openStore(ctx, o.dbEnv)
	if err != nil {
		return nil, nil, err
	}
	st.Telemetry = tel
	svc, err := logservice.Start(ctx, logservice.Config{
		DataDir: o.data, NATSURL: o.nats.url, NATSCredsFile: o.nats.creds, NATSNKeyFile: o.nats.nkey, NATSListen: o.natsListen, NATSListenPassword: listenPW, Replicas: o.replicas,
		Signer: headSigner, Keys: keys, CheckpointDir: o.checkpointDir,
		CheckpointEvery: time.Duration(o.checkpointEvery) * time.Second, CheckpointHeartbeat: time.Duration(o.checkpointBeat) * time.Second,
		CheckpointFirst: time.Second, // the first checkpoint follows the first append
		TrustProxy:      o.trustProxy.proxy, Logger: logger, Hosted: &logservice.Hosted{Store: st, LogOfLogsEvery: time.Duration(o.logOfLogsEvery) * time.Second}, Telemetry: tel, Waiting: o.waiting,
		Witnesses: o.witnesses, // C2SP witnesses cosign each tenant's checkpoints
	})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	// The default tenant (served at the root) exists from the first start on.
	err = svc.Retry(ctx, "the default tenant", func(ctx context.Context) error {
		_, err := svc.Admin().AddTenant(ctx, commandLineActor(), "default", "")
		return err
	})
	if err != nil && !errors.Is(err, tenancy.ErrTenantExists) {
		svc.Close()
		st.Close()
		return nil, nil, err
	}
	ah, err := admin.New(admin.Config{
		Token: adminToken, Admin: svc.Admin(), View: svc.View(), Store: st,
		Usage: func(tenant string) (string, uint64, bool) {
			m, n := svc.Quota().Used(tenant)
			return m, n, m != ""
		},
		PublicURL: o.publicURL, CheckpointsURL: o.checkpointsURL, KeyID: headSigner.KeyID(), TrustProxy: o.trustProxy.proxy, Logger: logger,
	})
	if err != nil {
		svc.Close()
		st.Close()
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/admin", ah)
	mux.Handle("/admin/", ah)
	mux.Handle("/", svc.Handler())
	return svc, mux, nil
}
