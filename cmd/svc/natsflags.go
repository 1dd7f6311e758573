package main

import (
	"context"
	"flag"
	"log/slog"

	"svc.dev/svc/pipeline"
)

// natsFlags are the broker flags of every command that connects to NATS (log,
// log-admin, portal, replay, exports, bench): where the broker is and how to log in.
type natsFlags struct {
	url, creds, nkey string
}

// register adds --nats-url (described by urlUsage), --nats-creds and --nats-nkey.
func (n *natsFlags) register(fs *flag.FlagSet, urlUsage string) {
	fs.StringVar(&n.url, "nats-url", "", urlUsage+"; comma-separate a cluster's nodes (nats://svc:PASSWORD@nats-1:4222,nats-2:4222): the user and password of the first URL log in to every node")
	fs.StringVar(&n.creds, "nats-creds", "", "NATS credentials `file` (user JWT and nkey seed, as nsc writes it) to log in with")
	fs.StringVar(&n.nkey, "nats-nkey", "", "`file` holding an nkey user seed (svc keygen --nats-nkey) to log in with; with --nats-listen, the only user the listener admits")
}

// natsCredentialsHelp is the help's paragraph on logging in to the broker, for the
// commands that attach to a hosted log's control plane.
const natsCredentialsHelp = `The broker wants credentials: for the embedded broker of svc log --nats-listen, the
nkey seed file that log server was given (--nats-nkey <file>, from svc keygen
--nats-nkey; up:hosted writes it to data/hosted/nats.nk, mode 0600); for a cluster,
the nkey seed, a credentials file (--nats-creds) or the user and password in the
first URL (nats://svc:PASSWORD@nats-1:4222,nats-2:4222,nats-3:4222), which then log
in to every node. Passwords never appear in messages (URLs are printed redacted).
`

// controlPlaneFlags are the flags of the commands that attach to a hosted log's
// control plane (log-admin, portal): its database and its broker, both required.
type controlPlaneFlags struct {
	dbEnv string
	nats  natsFlags
}

// register adds --db-env (described by dbUsage) and the broker flags.
func (c *controlPlaneFlags) register(fs *flag.FlagSet, dbUsage string) {
	fs.StringVar(&c.dbEnv, "db-env", "", dbUsage)
	c.nats.register(fs, "the log servers' NATS `URL` (required)")
}

// attach attaches to the control plane as client name (attachControlPlane).
func (c *controlPlaneFlags) attach(ctx context.Context, name string, logger *slog.Logger, errc chan<- error) (*controlPlane, error) {
	return attachControlPlane(ctx, c.dbEnv, c.nats.credentials(), name, logger, errc)
}

// words are the flags as given, for a command svc prints to be run as pasted.
func (n *natsFlags) words() string {
	w := "--nats-url " + shellWord(n.url)
	if n.creds != "" {
		w += " --nats-creds " + shellWord(n.creds)
	}
	if n.nkey != "" {
		w += " --nats-nkey " + shellWord(n.nkey)
	}
	return w
}

// credentials are the flags as pipeline.Connect takes them.
func (n *natsFlags) credentials() pipeline.Credentials {
	return pipeline.Credentials{URL: n.url, CredsFile: n.creds, NKeyFile: n.nkey}
}

// listenPassword is the password of --nats-listen-password-env, "" without it.
func (o *logOptions) listenPassword() (string, error) {
	if o.natsListenPWEnv == "" {
		return "", nil
	}
	if o.natsListen == "" {
		return "", usagef("--nats-listen-password-env is for the listener of --nats-listen")
	}
	return envValue("--nats-listen-password-env", o.natsListenPWEnv, "the password gateways and SDKs give the broker listener")
}
