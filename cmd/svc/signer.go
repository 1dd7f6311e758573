package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

func init() {
	register("signer", "run the signer: the only process holding the log key; signs tree heads over HTTP", runSigner)
}

const signerDescription = `Runs the signer service, the only process that holds the log's private key. In
database mode the log server reaches it with --signer-url and --signer-token-env and
never holds the key itself.

Routes:
  POST /sign    needs "Authorization: Bearer <token>"; body {payloadType, payload,
                tenant?, consistency?} (payload base64). Signs tree heads only
                (payloadType application/vnd.svc.treehead+json with a canonical tree
                head payload); anything else is refused with 400, so a stolen token
                cannot make the log key sign a receipt or a grant. Body at most 1 MiB
                (413 beyond).
  GET  /keys    the key document (no token): the current key first, then each
                --retired-key, so heads they signed keep verifying.
  GET  /health  {ok: true, keyid}

Only heads that extend: the signer remembers, per log, the last head it signed, in
--state-dir (one file per log, written and fsynced before the signature is answered,
so a kill -9 or a power cut forgets nothing answered). It signs a larger head only
with a valid RFC 6962 consistency proof from that one ({consistency: {fromSize,
proof: [hex]}}, which the log server sends), the same size only with the same root,
and never a smaller size; anything else is answered 409 {error, last: {log,
treeSize, rootHash}}. So a compromised or buggy log server holding the token cannot
get a fork or a rollback signed with the log key. A log is the head's "log" id, the
name the signature covers, and the state is kept under it (never under what the log
server says beside the head). A head that names no log is refused with 400: it could
pass for any log's. The log server names every head: a tenant's log id, or by
default svc-log/<tenant>. A log whose last head was kept under its tenant (heads
signed by svc 0.6.1 and earlier, without a log id) carries on: the first head under
its default name must extend that one.

A fresh signer's first head: the first head it is asked to sign for a log is trusted
(trust on first use, logged as a warning). To start from a known head instead, so
that even the first head must extend it, give --start-head <file>: the latest signed
head of the log (a tree head envelope, or a checkpoint file or /v1/log/head answer
holding one), which must verify against --key or a --retired-key; it is recorded for
its log unless the state already has a head for it. A state file that is corrupted
stops the signer at start and is never reset: restore --state-dir from a backup, or
move the bad file away and give the log's latest signed head with --start-head.

Retired keys: after a key rotation the new key's state starts empty (or from
--start-head); keep --state-dir across the rotation, since it is keyed by log, not by
key, so the new key too only signs heads that extend what the old one signed.

The shared token is read from the environment variable named by --token-env (never
from the command line, where other users could read it); startup fails if it is
unset, empty or shorter than 16 characters. The server keeps only its SHA-256 and
never logs it. The service speaks plain HTTP: keep the default --host 127.0.0.1, or
put TLS in front of it.

A retired .pub file carries no dates: its validFrom is the file's modification time
and its validTo is the current key's validFrom. The current key's validFrom is
--valid-from, by default the modification time of the --key file.

It prints its keyid and the address it listens on (with --port 0, the port chosen),
logs one JSON line per request to stderr (method, path, status, duration), and shuts
down gracefully on SIGINT or SIGTERM.

Example:
  export SIGNER_TOKEN=$(openssl rand -hex 32)
  svc signer --key keys/log.key --port 8091 --token-env SIGNER_TOKEN --state-dir /var/lib/svc-signer \
    --retired-key keys/log-2025.pub --log-id main`

func runSigner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("signer", "--key <k> --port <p> --token-env <ENV> --state-dir <dir> [--start-head <file>]... [--host 127.0.0.1] [--retired-key <pub>]... [--log-id <id>] [--valid-from <RFC 3339>]", signerDescription, stderr)
	keyPath := fs.String("key", "", "the log's private key file (<name>.key); required")
	port := fs.Int("port", -1, "TCP port to listen on; 0 picks a free one (printed); required")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	tokenEnv := fs.String("token-env", "", "name of the environment variable holding the shared token; required")
	var retired listFlag
	fs.Var(&retired, "retired-key", "a retired public key file (<name>.pub) to publish after the current key; repeatable")
	logID := fs.String("log-id", "", "log id named in the key document (\"log\")")
	stateDir := fs.String("state-dir", "", "directory of the last head signed per log (created 0700; keep it across restarts and key rotations, back it up); required")
	var startHeads listFlag
	fs.Var(&startHeads, "start-head", "a signed tree head `file` (envelope, checkpoint or head answer) to start a log from instead of trusting its first head; repeatable")
	validFrom := fs.String("valid-from", "", "when the current key became current (RFC 3339); default: the --key file's modification time")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return usagef("unexpected argument %q", rest[0])
	case *keyPath == "":
		return usagef("--key is required (the log's private key file)")
	case *port < 0:
		return usagef("--port is required (0 picks a free port)")
	case *port > 65535:
		return usagef("--port %d is not a TCP port", *port)
	case *tokenEnv == "":
		return usagef("--token-env is required (the name of the environment variable holding the shared token)")
	case *host == "":
		return usagef("--host must not be empty")
	case *stateDir == "":
		return usagef("--state-dir is required (where the last head signed for each log is kept)")
	}

	token, ok := os.LookupEnv(*tokenEnv)
	if !ok || token == "" {
		return fmt.Errorf("environment variable %s (named by --token-env) is not set or empty; set it to the shared signer token", *tokenEnv)
	}
	if err := remote.CheckToken(token); err != nil {
		return fmt.Errorf("environment variable %s (named by --token-env): %w", *tokenEnv, err)
	}
	key, from, retiredKeys, err := signerKeys(*keyPath, *validFrom, retired)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	heads, err := remote.OpenHeadStore(*stateDir)
	if err != nil {
		return err
	}
	for _, p := range startHeads {
		if err := startHead(heads, p, key, retiredKeys, logger); err != nil {
			return err
		}
	}
	srv, err := remote.NewServer(remote.ServerConfig{
		Key: key, Token: token, ValidFrom: from, Retired: retiredKeys, LogID: *logID, Logger: logger, Heads: heads,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	addr := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "keyid      %s\n", key.KeyID())
	fmt.Fprintf(stdout, "listening  %s\n", addr)
	logger.Info("signer started", slog.String("addr", addr), slog.String("keyid", key.KeyID()), slog.Int("retired", len(retiredKeys)),
		slog.String("stateDir", *stateDir), slog.Int("logs", heads.Len()))
	err = srv.Serve(ctx, ln)
	logger.Info("signer stopped")
	return err
}

// startHead records the signed head in file as its log's last head, unless the state
// already has one for that log.
func startHead(heads *remote.HeadStore, path string, key *signer.Key, retired []remote.RetiredKey, logger *slog.Logger) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--start-head: %w", err)
	}
	keys := []signer.PublicKey{key.Public()}
	for _, r := range retired {
		keys = append(keys, r.Key)
	}
	th, tenant, err := remote.ParseStartHead(data, keys)
	if err != nil {
		return fmt.Errorf("--start-head %s: %w", path, err)
	}
	k := remote.StateKey(th.Log, tenant)
	if k == "" {
		return fmt.Errorf("--start-head %s: the head names no log and the file no tenant; give the checkpoint file (it names its tenant) or a head that names its log", path)
	}
	if last, ok := heads.Last(k); ok {
		logger.Info("--start-head ignored: the state already has a head for this log", slog.String("log", k),
			slog.Uint64("stateSize", last.TreeSize), slog.Uint64("startSize", th.TreeSize))
		return nil
	}
	logger.Info("log started from --start-head", slog.String("log", k), slog.Uint64("treeSize", th.TreeSize))
	return heads.Record(remote.SignedHead{Log: k, TreeSize: th.TreeSize, RootHash: th.RootHash})
}

// signerKeys loads the signing key, when it became current (--valid-from or the key
// file's modification time) and the retired keys.
func signerKeys(keyPath, validFrom string, retired []string) (*signer.Key, time.Time, []remote.RetiredKey, error) {
	key, err := signer.LoadPrivateKey(keyPath)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	var from time.Time
	if validFrom != "" {
		if from, err = receipt.ParseTime(validFrom); err != nil {
			return nil, time.Time{}, nil, usagef("--valid-from: %v", err)
		}
	} else {
		st, err := os.Stat(keyPath)
		if err != nil {
			return nil, time.Time{}, nil, err
		}
		from = st.ModTime()
	}
	var retiredKeys []remote.RetiredKey
	for _, p := range retired {
		rk, err := remote.LoadRetiredKey(p, from)
		if err != nil {
			return nil, time.Time{}, nil, err
		}
		retiredKeys = append(retiredKeys, rk)
	}
	return key, from, retiredKeys, nil
}
