package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
)

var vectorsDir = filepath.Join("..", "..", "conformance", "vectors")

// TestCLIReproducesVectors runs every conformance vector through `svc verify` or
// `svc audit` exactly as a user would type it, and checks the exit code, the RESULT
// line, the first FAIL line, and that --json agrees.
func TestCLIReproducesVectors(t *testing.T) {
	m, err := conformance.LoadManifest(vectorsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			args := cliArgs(t, m, c)
			code, out, errOut := runSvc(t, args...)
			wantCode := 0
			if c.Expect.Result != "VERIFIED" {
				wantCode = 1
			}
			if code != wantCode {
				t.Fatalf("svc %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, out, errOut)
			}
			if wantCode == 0 && !strings.Contains(out, "\nRESULT: VERIFIED\n") {
				t.Fatalf("no RESULT: VERIFIED line:\n%s", out)
			}
			if first := firstFail(out); first != c.Expect.FailedCheck {
				t.Fatalf("first FAIL line names %q, want %q\n%s", first, c.Expect.FailedCheck, out)
			}
			var rep conformance.Report
			_, jout, _ := runSvc(t, append(args, "--json")...)
			if err := json.Unmarshal([]byte(jout), &rep); err != nil {
				t.Fatalf("--json: %v\n%s", err, jout)
			}
			if rep.Result != c.Expect.Result || len(rep.Checks) != len(c.Expect.Checks) {
				t.Fatalf("--json says %s with %d checks, want %s with %d", rep.Result, len(rep.Checks), c.Expect.Result, len(c.Expect.Checks))
			}
		})
	}
}

func cliArgs(t *testing.T, m *conformance.Manifest, c conformance.Case) []string {
	var args []string
	keys := func(flag string, names []string) {
		for _, n := range names {
			args = append(args, flag, filepath.Join(vectorsDir, m.Keys[n]))
		}
	}
	in := c.Inputs
	if c.Kind == "verify" {
		args = []string{"verify", filepath.Join(vectorsDir, c.Bundle)}
		keys("--issuer-key", in.IssuerKeys)
		keys("--principal-key", in.PrincipalKeys)
		keys("--upstream-key", in.UpstreamKeys)
		keys("--witness-key", in.WitnessKeys)
		for _, s := range in.Secrets {
			env := map[string]string{receipt.ProviderPaymentWebhook: "SVC_TEST_STRIPE_SECRET", receipt.ProviderRepoDelivery: "SVC_TEST_GITHUB_SECRET"}[s]
			t.Setenv(env, m.Secrets[s])
			flag := map[string]string{receipt.ProviderPaymentWebhook: "--stripe-secret-env", receipt.ProviderRepoDelivery: "--github-secret-env"}[s]
			args = append(args, flag, env)
		}
	} else {
		args = []string{"audit", "--older", filepath.Join(vectorsDir, c.Older), "--newer", filepath.Join(vectorsDir, c.Newer)}
		keys("--issuer-key", in.IssuerKeys)
		keys("--witness-key", in.WitnessKeys)
	}
	keys("--log-key", in.LogKeys)
	if in.Log != "" {
		args = append(args, "--log", filepath.Join(vectorsDir, in.Log))
	}
	if in.LogID != "" {
		args = append(args, "--log-id", in.LogID)
	}
	for _, f := range in.ToolDefinitions {
		args = append(args, "--tool-definitions", filepath.Join(vectorsDir, f))
	}
	return args
}

func firstFail(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "FAIL "); ok {
			name, _, _ := strings.Cut(rest, ": ")
			return name
		}
	}
	return ""
}

// TestVerifyUsage: missing keys or bundle are usage errors (exit 2) that say what to do.
func TestVerifyUsage(t *testing.T) {
	code, _, errOut := runSvc(t, "verify", "x.json")
	if code != 2 || !strings.Contains(errOut, "--issuer-key is required") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runSvc(t, "verify", "--issuer-key", "k.pub")
	if code != 2 || !strings.Contains(errOut, "want a bundle file, a directory of bundles or -") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runSvc(t, "verify", "--help")
	if code != 0 || !strings.Contains(errOut, "-gateway-key") || !strings.Contains(errOut, "-stripe-secret-env") {
		t.Fatalf("--help: exit %d\n%s", code, errOut)
	}
}
