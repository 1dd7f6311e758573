package main

import (
	"context"
	"io"
	"net/url"
	"strings"

	"svc.dev/svc/client"
	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func init() {
	register("audit", "check that a newer log head extends an older one", runAudit)
}

const auditHelp = `Checks that the log behind a newer tree head extends the log behind an older one: both
heads must be signed by a trusted key, the older must not be larger, and a consistency
proof (from a copy of the log file, or from the log server's /consistency route) must
verify. With --witness-key or --witness-url, the newer head must also be countersigned
by a witness. --older and --newer take a receipt bundle, a published checkpoint, an API
checkpoint or a tree head envelope. Exit 0 on success, 1 otherwise.

Keys: --issuer-key and --log-key name trusted head signers; with --log-url and neither,
the log's published key document is trusted.

Example:
  svc audit --older receipts/a.json --newer receipts/b.json --log data/receipts.log --issuer-key keys/gateway.pub`

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", "--older <file> --newer <file> (--log <file> | --log-url <url>) [flags]", auditHelp, stderr)
	older := fs.String("older", "", "the older head: a bundle or checkpoint `file`")
	newer := fs.String("newer", "", "the newer head: a bundle or checkpoint `file`")
	logFile := fs.String("log", "", "a copy of the log `file` to prove consistency from")
	logURL := fs.String("log-url", "", "log server base `URL` (…/t/<tenant> for a tenant) to prove consistency from")
	var issuerKeys, logKeys, witnessKeys listFlag
	fs.Var(&issuerKeys, "issuer-key", "trusted head signer (issuer) public key `file`; repeatable")
	fs.Var(&logKeys, "log-key", "trusted log public key `file`; repeatable")
	logID := fs.String("log-id", "", "the log `id` both heads must name")
	fs.Var(&witnessKeys, "witness-key", "trusted witness public key `file`; repeatable; requires a countersignature")
	witnessURL := fs.String("witness-url", "", "witness output base `URL`; its key document and countersigned checkpoint are fetched")
	tenant := fs.String("tenant", "default", "the tenant `name` under the witness URL")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *older == "" || *newer == "" {
		return usagef("--older and --newer are required")
	}
	if (*logFile == "") == (*logURL == "") {
		return usagef("give exactly one of --log and --log-url")
	}
	oldEnv, err := conformance.ReadHeadFile(*older)
	if err != nil {
		return err
	}
	newEnv, err := conformance.ReadHeadFile(*newer)
	if err != nil {
		return err
	}
	opts := conformance.AuditOptions{LogID: *logID}
	keys, err := signer.LoadPublicKeys(append(append([]string{}, issuerKeys...), logKeys...))
	if err != nil {
		return err
	}
	opts.Keys = keys
	var src conformance.ConsistencySource
	if *logFile != "" {
		if src, err = conformance.OpenFileCopy(*logFile); err != nil {
			return err
		}
	} else {
		s, err := client.NewLogServer(*logURL)
		if err != nil {
			return usagef("%v", err)
		}
		src = s
		if len(opts.Keys) == 0 {
			if opts.Keys, err = s.Keys(ctx); err != nil {
				return err
			}
		}
	}
	if len(opts.Keys) == 0 {
		return usagef("no trusted head signer: give --issuer-key or --log-key")
	}
	if opts.WitnessKeys, err = signer.LoadPublicKeys(witnessKeys); err != nil {
		return err
	}
	if *witnessURL != "" {
		if err := loadWitness(ctx, *witnessURL, *tenant, newEnv, &opts); err != nil {
			return err
		}
	}
	rep := conformance.Audit(oldEnv, newEnv, src, opts)
	return writeReport(stdout, rep, *asJSON, rep.Verified)
}

// loadWitness fetches the witness's key document (unless keys were given) and its
// countersigned checkpoint at the newer head's size.
func loadWitness(ctx context.Context, base, tenant string, newer *receipt.Envelope, opts *conformance.AuditOptions) error {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return usagef("--witness-url %q is not a URL", base)
	}
	base = strings.TrimRight(base, "/")
	if opts.WitnessKeys, err = witnessKeys(ctx, base, opts.WitnessKeys); err != nil {
		return err
	}
	th, err := receipt.DecodeTreeHead(newer)
	if err != nil {
		return err
	}
	// No countersigned checkpoint at that size: the check then fails with its reason.
	opts.WitnessHead, _ = witnessCheckpoint(ctx, client.CheckpointURL(base, tenant, th.TreeSize))
	return nil
}
