package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOutsidePartiesLinkNoServer: the packages that run on machines the log operator
// does not control (the verifier, the witness, the probe, the export), and the
// producers (gateway, SDK, sidecar, exporters), must not link the broker's server
// code nor any server internal of this module.
func TestOutsidePartiesLinkNoServer(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	pkgs := []string{"client", "conformance", "witness", "monitor", "logexport", "gateway", "sdk", "sidecar", "exporters"}
	for _, p := range pkgs {
		out, err := exec.Command(goBin, "list", "-deps", "svc.dev/svc/"+p).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", p, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/nats-io/nats-server") || strings.HasPrefix(dep, "svc.dev/svc/internal/") {
				t.Errorf("%s links %s", p, dep)
			}
		}
	}
}
