package conformance

import (
	"slices"
	"testing"
)

const vectorsDir = "vectors"

// TestVectorVerdicts reproduces every verdict, the failing check and the list of checks.
func TestVectorVerdicts(t *testing.T) {
	m, err := LoadManifest(vectorsDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Cases) < 50 {
		t.Fatalf("only %d cases", len(m.Cases))
	}
	for i := range m.Cases {
		c := &m.Cases[i]
		t.Run(c.Name, func(t *testing.T) {
			rep, err := RunCase(vectorsDir, m, c)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Result != c.Expect.Result || rep.FirstFailure() != c.Expect.FailedCheck {
				t.Fatalf("got %s (first failure %q), want %s (%q)\n%+v", rep.Result, rep.FirstFailure(), c.Expect.Result, c.Expect.FailedCheck, rep.Checks)
			}
			if !slices.Equal(rep.CheckNames(), c.Expect.Checks) {
				t.Fatalf("checks ran %v\nwant %v", rep.CheckNames(), c.Expect.Checks)
			}
		})
	}
}

// TestVectorsCoverEveryCheck: every check of the verification table and of audit has a
// vector in which it is the one that fails, and every typical cause has a vector.
func TestVectorsCoverEveryCheck(t *testing.T) {
	m, err := LoadManifest(vectorsDir)
	if err != nil {
		t.Fatal(err)
	}
	failing := map[string]bool{}
	causes := map[string]bool{}
	for _, c := range m.Cases {
		failing[c.Expect.FailedCheck] = true
		causes[c.Cause] = true
	}
	all := []string{CheckReceiptSignature, CheckPayloadType, CheckIssuerKind, CheckIssuerKeyID, CheckCarriesDelegation,
		CheckCarriesPolicy, CheckDelegationSignature, CheckDelegationChain, CheckDelegationBinds, CheckDelegationValid,
		CheckToolInScope, CheckPrincipalClaimed, CheckArgsDigest, CheckUpstreamKey, CheckProviderSecret, CheckPolicyConsistent,
		CheckNoPolicyErrors, CheckAuthSignature, CheckAuthNamesCall, CheckAuthTreeHead, CheckAuthInclusion, CheckAuthBeforeExecution,
		CheckTreeHeadSignature, CheckTreeHeadLog, CheckTreeHeadSize, CheckInclusion, CheckLogFileRoot,
		CheckWitnessCovers, CheckOlderNotLarger, CheckNewerExtends, CheckWitnessCosigned}
	for _, name := range all {
		if !failing[name] {
			t.Errorf("no vector fails at %q", name)
		}
	}
	// SPEC.md, "Verifier and tools", typical causes.
	for _, cause := range []string{"edited receipt", "untrusted issuer key", "wrong file", "SDK receipt relabelled as gateway",
		"a sub-agent given more than its delegator", "an issuer that executed after a deny", "an authorization spliced from another call",
		"evidence written after the side effect", "a log copy that diverges", "history rewritten between two heads (audit fails)"} {
		if !causes[cause] {
			t.Errorf("no vector for the typical cause %q", cause)
		}
	}
}
