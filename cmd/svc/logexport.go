package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"svc.dev/svc/logexport"
)

func init() {
	register("log-export", "export a tenant's log and check that it adds up", runLogExport)
}

const logExportHelp = `Exports a tenant's log from a log server into --out and checks that the export adds up:
the live head and every published checkpoint must verify against the log's published
key document, and the leaf hashes, fetched from /t/<tenant>/leaves in pages of 10,000
with the tenant's bearer token and rebuilt into a Merkle tree, must give the head's root
at the head's size and every checkpoint's root at its size. Progress goes to stderr.

Only when everything adds up are these files written:
  log.jsonl         the log as a SPEC log file; the leaves route returns leaf hashes,
                    so every line is {"hash":"<64 hex>"} (svc verify --log and
                    svc audit --log read it)
  head.json         the signed head (/head)
  keys.json         the published key document
  checkpoints.json  the published checkpoints (/checkpoints)
  usage.json        this month's usage (/t/<tenant>/usage)
  audit.json        the administrative audit trail (/t/<tenant>/audit)
  export.json       summary: tenant, logId, treeSize, rootHash, exportedAt, counts,
                    checks, and each file's size and SHA-256

After one PASS/FAIL line per check, the result line is "EXPORT ADDS UP: ..." (exit 0),
or exactly "EXPORT DOES NOT ADD UP" followed by one line per failure (exit 1).

Example:
  SVC_TENANT_TOKEN=... svc log-export --log-url https://log.example.com --tenant acme \
    --token-env SVC_TENANT_TOKEN --out export/acme`

func runLogExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("log-export", "--log-url <url> --tenant <name> --token-env <ENV> --out <dir>", logExportHelp, stderr)
	logURL := fs.String("log-url", "", "the log server's base `URL`")
	tenant := fs.String("tenant", "", "the tenant `name` to export (\"default\" for the tenant at the server root)")
	tokenEnv := fs.String("token-env", "", "environment `variable` holding the tenant's bearer token")
	out := fs.String("out", "", "output `directory`")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *logURL == "" || *tenant == "" || *tokenEnv == "" || *out == "" {
		return usagef("--log-url, --tenant, --token-env and --out are required")
	}
	token, ok := os.LookupEnv(*tokenEnv)
	if !ok || token == "" {
		return fmt.Errorf("environment variable %s (named by --token-env) is not set; set it to the tenant's bearer token", *tokenEnv)
	}
	res, err := logexport.Run(ctx, logexport.Options{LogURL: *logURL, Tenant: *tenant, Token: token, Out: *out, Progress: stderr})
	if err != nil {
		return err
	}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	if !res.OK {
		return exitCode(1)
	}
	return nil
}
