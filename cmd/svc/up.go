package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"

	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func init() {
	register("up", "run the whole log service on its embedded default", runUp)
}

const upHelp = `Runs the whole log service in one process on the embedded default: NATS JetStream
in-process (no TCP listener), one sequencer, the HTTP log server and checkpoints, all
under --data. On first run it generates the log key (<data>/keys/log.key) and a bearer
token, which it prints once and keeps only as a hash (<data>/token.sha256). Prints the
URLs, the key id and ready-to-use svc verify and gateway config examples.

Example:
  go tool task up            # the same as: svc up --data ./data`

func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("up", "[--data ./data] [flags]", upHelp, stderr)
	var o logOptions
	fs.StringVar(&o.data, "data", "data", "`directory` for keys, the log file, the JetStream store and checkpoints")
	fs.StringVar(&o.tokenEnv, "token-env", "", "environment `variable` holding the bearer token to use instead of the generated one")
	fs.StringVar(&o.logID, "log-id", "", "the log `id`, named in its heads")
	o.register(fs)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.checkpointsPort == -1 {
		o.checkpointsPort = o.port + 1
		if o.port == 0 {
			o.checkpointsPort = 0
		}
	}
	o.key = filepath.Join(o.data, "keys", "log.key")
	o.file = filepath.Join(o.data, "log.jsonl")
	newKey := false
	if _, err := os.Stat(o.key); errors.Is(err, iofs.ErrNotExist) {
		k, err := signer.GenerateKey()
		if err != nil {
			return err
		}
		if _, _, err := k.WriteKeyFiles(filepath.Join(o.data, "keys"), "log"); err != nil {
			return err
		}
		newKey = true
	}
	token := ""
	if o.tokenEnv == "" {
		var err error
		if token, o.tokenHashes, err = upToken(o.data); err != nil {
			return err
		}
	}
	return serveLog(ctx, o, stdout, stderr, func(logAddr, cpAddr, keyID string) {
		base := "http://" + logAddr
		fmt.Fprintf(stdout, "svc is up.\n\n")
		if newKey {
			fmt.Fprintf(stdout, "  generated the log key     %s (public half: %s)\n", o.key, filepath.Join(o.data, "keys", "log.pub"))
		}
		fmt.Fprintf(stdout, "  log key id                %s\n", keyID)
		fmt.Fprintf(stdout, "  log                       %s   (append: POST %s/append)\n", base, base)
		fmt.Fprintf(stdout, "  key document              %s/.well-known/svc-log.json\n", base)
		if cpAddr != "" {
			fmt.Fprintf(stdout, "  checkpoints (read-only)   http://%s/default/latest.json\n", cpAddr)
		}
		fmt.Fprintf(stdout, "  log file                  %s\n", o.file)
		if o.telemetry.metrics {
			fmt.Fprintf(stdout, "  metrics                   %s\n", o.telemetry.scrapeCommand(base))
		}
		if token != "" {
			fmt.Fprintf(stdout, "\n  bearer token (shown once; only its hash is kept):\n    %s\n", token)
		} else if o.tokenEnv == "" {
			fmt.Fprintf(stdout, "\n  bearer token: the one printed on first run (or run with --token-env VAR)\n")
		}
		fmt.Fprintf(stdout, "\nAppend a leaf:\n  curl -s -H 'Authorization: Bearer <token>' -d '{\"leaf\":\"hello\"}' %s/append\n", base)
		fmt.Fprintf(stdout, "\nA gateway appending here (in its config):\n  \"log\": { \"url\": \"%s/append\", \"tokenEnv\": \"SVC_LOG_TOKEN\" }\n", base)
		fmt.Fprintf(stdout, "\nVerify a receipt it issued:\n  svc verify receipts/<id>.json --issuer-key <gateway.pub> --principal-key <principal.pub> \\\n    --log-key %s --log-url %s\n\n", filepath.Join(o.data, "keys", "log.pub"), base)
	})
}

// upToken returns a new token (and its hash) on first run, or "" and the stored hash.
func upToken(dataDir string) (string, [][32]byte, error) {
	path := filepath.Join(dataDir, "token.sha256")
	if data, err := os.ReadFile(path); err == nil {
		var stored struct {
			SHA256 string `json:"sha256"`
		}
		if err := json.Unmarshal(data, &stored); err != nil {
			return "", nil, fmt.Errorf("%s: %w", path, err)
		}
		b, err := hex.DecodeString(stored.SHA256)
		if err != nil || len(b) != 32 {
			return "", nil, fmt.Errorf("%s: sha256 is not 64 hex characters; delete the file to make a new token", path)
		}
		var h [32]byte
		copy(h[:], b)
		return "", [][32]byte{h}, nil
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", nil, err
	}
	token := hex.EncodeToString(raw[:])
	h := logserver.HashToken(token)
	data, _ := json.Marshal(map[string]string{"sha256": hex.EncodeToString(h[:])})
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", nil, err
	}
	if err := receipt.WriteFileAtomic(path, data, 0o600); err != nil {
		return "", nil, err
	}
	return token, [][32]byte{h}, nil
}
