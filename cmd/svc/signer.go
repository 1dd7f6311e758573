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
  POST /sign    needs "Authorization: Bearer <token>"; body {payloadType, payload}
                (payload base64). Signs tree heads only (payloadType
                application/vnd.svc.treehead+json with a canonical tree head payload);
                anything else is refused with 400, so a stolen token cannot make the
                log key sign a receipt or a grant. Body at most 1 MiB (413 beyond).
  GET  /keys    the key document (no token): the current key first, then each
                --retired-key, so heads they signed keep verifying.
  GET  /health  {ok: true, keyid}

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
  svc signer --key keys/log.key --port 8091 --token-env SIGNER_TOKEN --retired-key keys/log-2025.pub --log-id main`

func runSigner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("signer", "--key <k> --port <p> --token-env <ENV> [--host 127.0.0.1] [--retired-key <pub>]... [--log-id <id>] [--valid-from <RFC 3339>]", signerDescription, stderr)
	keyPath := fs.String("key", "", "the log's private key file (<name>.key); required")
	port := fs.Int("port", -1, "TCP port to listen on; 0 picks a free one (printed); required")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	tokenEnv := fs.String("token-env", "", "name of the environment variable holding the shared token; required")
	var retired listFlag
	fs.Var(&retired, "retired-key", "a retired public key file (<name>.pub) to publish after the current key; repeatable")
	logID := fs.String("log-id", "", "log id named in the key document (\"log\")")
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
	}

	token, ok := os.LookupEnv(*tokenEnv)
	if !ok || token == "" {
		return fmt.Errorf("environment variable %s (named by --token-env) is not set or empty; set it to the shared signer token", *tokenEnv)
	}
	if err := remote.CheckToken(token); err != nil {
		return fmt.Errorf("environment variable %s (named by --token-env): %w", *tokenEnv, err)
	}
	key, err := signer.LoadPrivateKey(*keyPath)
	if err != nil {
		return err
	}
	var from time.Time
	if *validFrom != "" {
		if from, err = receipt.ParseTime(*validFrom); err != nil {
			return usagef("--valid-from: %v", err)
		}
	} else {
		st, err := os.Stat(*keyPath)
		if err != nil {
			return err
		}
		from = st.ModTime()
	}
	var retiredKeys []remote.RetiredKey
	for _, p := range retired {
		rk, err := remote.LoadRetiredKey(p, from)
		if err != nil {
			return err
		}
		retiredKeys = append(retiredKeys, rk)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	srv, err := remote.NewServer(remote.ServerConfig{
		Key: key, Token: token, ValidFrom: from, Retired: retiredKeys, LogID: *logID, Logger: logger,
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
	logger.Info("signer started", slog.String("addr", addr), slog.String("keyid", key.KeyID()), slog.Int("retired", len(retiredKeys)))
	err = srv.Serve(ctx, ln)
	logger.Info("signer stopped")
	return err
}
