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
token, which it prints once and keeps only as a hash (<data>/token.sha256), written
once the server serves (a start that fails keeps none, so the next start prints a new
one). The first checkpoint is published as soon as the log grows, then every
--checkpoint-every seconds. Prints the URLs, the key id and commands that run as
printed (an append with curl, svc log-check, a gateway's log config).

Example:
  go tool task up            # builds bin/svc, then: bin/svc up --data ./data
  go tool task up PORT=9090  # the log on 9090, its checkpoints on 9091`

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
	tok, err := upToken(o.data, o.tokenEnv)
	if err != nil {
		return err
	}
	o.tokenHashes = tok.hashes
	return serveLog(ctx, o, stdout, stderr, func(logAddr, cpAddr, keyID string) error {
		// The new token's hash is kept only now that the server serves: a start that
		// failed (a port in use) shows no token and keeps none, so the next start makes one.
		if err := tok.persist(); err != nil {
			return err
		}
		printUp(stdout, o, upLines{base: "http://" + logAddr, cpAddr: cpAddr, keyID: keyID, newKey: newKey, tok: tok})
		return nil
	})
}

// upLines is what svc up prints once it serves.
type upLines struct {
	base, cpAddr, keyID string
	newKey              bool
	tok                 upTok
}

// printUp prints the URLs and commands of a running svc up; every command runs as
// printed from the working directory (with the token when it is known, else with
// the variable that holds it), and every URL opens.
func printUp(w io.Writer, o logOptions, l upLines) {
	svcCmd := selfCommand()
	fmt.Fprintf(w, "svc is up.\n\n")
	if l.newKey {
		fmt.Fprintf(w, "  generated the log key     %s (public half: %s)\n", o.key, filepath.Join(o.data, "keys", "log.pub"))
	}
	fmt.Fprintf(w, "  log key id                %s\n", l.keyID)
	fmt.Fprintf(w, "  log                       %s/head   (append: POST %s/append)\n", l.base, l.base)
	fmt.Fprintf(w, "  key document              %s/.well-known/svc-log.json\n", l.base)
	cpFlag := ""
	if l.cpAddr != "" {
		fmt.Fprintf(w, "  checkpoints (read-only)   http://%s/default/latest.json\n", l.cpAddr)
		cpFlag = " --checkpoints-url http://" + l.cpAddr
	}
	fmt.Fprintf(w, "  checkpoints               the first as soon as the log grows, then every %d s (--checkpoint-every)\n", o.checkpointEvery)
	fmt.Fprintf(w, "  log file                  %s\n", o.file)
	if o.telemetry.metrics {
		fmt.Fprintf(w, "  metrics                   %s\n", o.telemetry.scrapeCommand(l.base))
	}
	auth := "'Authorization: Bearer " + l.tok.token + "'"
	switch {
	case l.tok.token != "":
		fmt.Fprintf(w, "\n  bearer token (shown once; only its hash is kept, in %s):\n    %s\n", filepath.Join(o.data, "token.sha256"), l.tok.token)
	case o.tokenEnv != "":
		auth = "\"Authorization: Bearer $" + o.tokenEnv + "\""
	default:
		auth = "\"Authorization: Bearer $SVC_LOG_TOKEN\""
		fmt.Fprintf(w, "\n  bearer token: the one printed at the first start; set SVC_LOG_TOKEN to it for the commands below\n"+
			"  (lost it? stop svc, delete %s, start again: a new one is printed)\n", filepath.Join(o.data, "token.sha256"))
	}
	fmt.Fprintf(w, "\nAppend a leaf:\n  curl -s -H %s -d '{\"leaf\":\"hello\"}' %s/append\n", auth, l.base)
	fmt.Fprintf(w, "\nProbe the log from outside (its head, key document, checkpoints):\n  %s log-check --log-url %s%s\n", svcCmd, l.base, cpFlag)
	fmt.Fprintf(w, "\nA gateway appending here (in its config; the token in SVC_LOG_TOKEN):\n  \"log\": { \"url\": \"%s/append\", \"tokenEnv\": \"SVC_LOG_TOKEN\" }\n", l.base)
	fmt.Fprintf(w, "\nIts receipts verify against this log with these flags added to %s verify:\n  --log-key %s --log-url %s\n\n", svcCmd, filepath.Join(o.data, "keys", "log.pub"), l.base)
}

// upTok is svc up's bearer token: a new one (token set, persist keeps its hash) or
// the hash kept from an earlier start (token empty), or none with --token-env.
type upTok struct {
	token  string
	hashes [][32]byte
	path   string // <data>/token.sha256
}

// persist keeps a new token's hash (0600); nothing for a stored one.
func (t upTok) persist() error {
	if t.token == "" {
		return nil
	}
	h := t.hashes[0]
	data, _ := json.Marshal(map[string]string{"sha256": hex.EncodeToString(h[:])})
	if err := os.MkdirAll(filepath.Dir(t.path), 0o755); err != nil {
		return err
	}
	return receipt.WriteFileAtomic(t.path, data, 0o600)
}

// upToken returns a new token on first run (kept only by persist), or the stored
// hash; nothing with --token-env.
func upToken(dataDir, tokenEnv string) (upTok, error) {
	path := filepath.Join(dataDir, "token.sha256")
	if tokenEnv != "" {
		return upTok{path: path}, nil
	}
	if data, err := os.ReadFile(path); err == nil {
		var stored struct {
			SHA256 string `json:"sha256"`
		}
		if err := json.Unmarshal(data, &stored); err != nil {
			return upTok{}, fmt.Errorf("%s: %w", path, err)
		}
		b, err := hex.DecodeString(stored.SHA256)
		if err != nil || len(b) != 32 {
			return upTok{}, fmt.Errorf("%s: sha256 is not 64 hex characters; delete the file to make a new token", path)
		}
		var h [32]byte
		copy(h[:], b)
		return upTok{hashes: [][32]byte{h}, path: path}, nil
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return upTok{}, err
	}
	token := hex.EncodeToString(raw[:])
	return upTok{token: token, hashes: [][32]byte{logserver.HashToken(token)}, path: path}, nil
}
