package deploy_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"svc.dev/svc/internal/svcbin"
	"svc.dev/svc/pipeline"
)

var svcBin string

func TestMain(m *testing.M) { svcbin.Main(m, &svcBin) }

// TestNATSClusterConfigs: the three node files, and the StatefulSet's config as each
// pod sees it, pass `nats-server -t -c <file>` as the nats-server of go.mod runs it
// (server.ConfigureOptions is what its main calls; the Debian binary on the build
// machines is 2.9, older than the sync_interval these files use), then
// server.NewServer's validation; and they form one cluster: distinct names, the same
// cluster name, every node routing to the two others, JetStream with fsync on every
// write and room for the largest committed batch.
func TestNATSClusterConfigs(t *testing.T) {
	newNKey(t)
	files, _ := filepath.Glob("nats/nats-*.conf")
	if len(files) != 3 {
		t.Fatalf("nats/: %d node files, want 3", len(files))
	}
	names := map[string]bool{}
	for _, f := range files {
		opts := checkNATSConfig(t, f)
		names[opts.ServerName] = true
		if len(opts.Routes) != 2 {
			t.Errorf("%s: %d routes, want the 2 other nodes", f, len(opts.Routes))
		}
		for _, r := range opts.Routes {
			if r.Hostname() == opts.ServerName {
				t.Errorf("%s: routes to itself (%s)", f, r)
			}
		}
	}
	if len(names) != 3 {
		t.Errorf("server names %v, want 3 distinct", names)
	}

	conf := configMapData(t, "kubernetes/nats.yaml", "nats-config", "nats.conf")
	dir := t.TempDir()
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		pod := fmt.Sprintf("nats-%d", i)
		t.Setenv("POD_NAME", pod)
		opts := checkNATSConfig(t, path)
		if opts.ServerName != pod || len(opts.Routes) != 3 {
			t.Errorf("kubernetes nats.conf as %s: server_name %q, %d routes; want %s and the 3 pods", pod, opts.ServerName, len(opts.Routes), pod)
		}
	}
}

// newNKey writes a fresh nkey user seed as svc keygen --nats-nkey does, sets
// SVC_NATS_NKEY to its public key (as the nodes' environment files do) and returns the
// seed file.
func newNKey(t *testing.T) string {
	t.Helper()
	seed := filepath.Join(t.TempDir(), "nats.nk")
	out, err := exec.Command(svcBin, "keygen", "--nats-nkey", seed).CombinedOutput()
	if err != nil {
		t.Fatalf("svc keygen --nats-nkey: %v\n%s", err, out)
	}
	_, pub, ok := strings.Cut(string(out), "public key   ")
	if !ok {
		t.Fatalf("svc keygen --nats-nkey printed no public key:\n%s", out)
	}
	t.Setenv("SVC_NATS_NKEY", strings.TrimSpace(pub))
	return seed
}

func checkNATSConfig(t testing.TB, path string) *server.Options {
	t.Helper()
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	noop := func() {}
	opts, err := server.ConfigureOptions(fs, []string{"-t", "-c", path}, noop, noop, noop)
	if err != nil {
		t.Fatalf("nats-server -t -c %s: %v", path, err)
	}
	switch {
	case !opts.CheckConfig:
		t.Errorf("%s: -t did not set CheckConfig", path)
	case !opts.JetStream:
		t.Errorf("%s: JetStream is off", path)
	case !opts.SyncAlways:
		t.Errorf("%s: JetStream does not fsync every write (sync_interval: always)", path)
	case opts.MaxPayload < pipeline.MaxBatchBytes+64<<10:
		t.Errorf("%s: max_payload %d is below a committed batch (%d)", path, opts.MaxPayload, pipeline.MaxBatchBytes+64<<10)
	case opts.Cluster.Name != "svc" || opts.Cluster.Port != 6222:
		t.Errorf("%s: cluster %q on port %d, want svc on 6222", path, opts.Cluster.Name, opts.Cluster.Port)
	case len(opts.Users) != 0 || len(opts.Nkeys) != 1 || opts.Nkeys[0].Nkey != os.Getenv("SVC_NATS_NKEY"):
		t.Errorf("%s: want one user, the nkey of $SVC_NATS_NKEY", path)
	}
	// NewServer validates what parsing does not (cluster and JetStream constraints);
	// it neither listens nor touches the store.
	opts.StoreDir = t.TempDir()
	if _, err := server.NewServer(opts); err != nil {
		t.Errorf("%s: the server refuses the options: %v", path, err)
	}
	return opts
}

// TestSystemdUnits: `systemd-analyze verify` accepts every unit without a word (it
// exits 0 on unknown keys and bad values, printing them, so any output fails), with
// ExecStart pointed at the built binary (verify wants the executable to exist).
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is not installed: go tool task setup installs Debian's systemd package")
		}
		t.Skip("systemd-analyze is not installed (apt-get install systemd); CI runs this test")
	}
	units, _ := filepath.Glob("systemd/*.service")
	if len(units) != 4 {
		t.Fatalf("systemd/: %d units, want log, signer, witness and portal", len(units))
	}
	dir := t.TempDir()
	var paths []string
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(p, bytes.ReplaceAll(data, []byte("/usr/local/bin/svc"), []byte(svcBin)), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestFlagsExist: every flag the units and manifests pass to svc is one that
// `svc <command> --help` of the built binary lists.
func TestFlagsExist(t *testing.T) {
	var cmds []command
	units, _ := filepath.Glob("systemd/*.service")
	for _, u := range units {
		cmds = append(cmds, unitCommands(t, u)...)
	}
	cmds = append(cmds, manifestCommands(t)...)
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[c.sub] = true
	}
	for _, want := range []string{"log", "signer", "witness", "portal"} {
		if !seen[want] {
			t.Errorf("no unit or manifest runs svc %s", want)
		}
	}
	helps := map[string][]string{}
	for _, c := range cmds {
		flags, ok := helps[c.sub]
		if !ok {
			flags = helpFlags(t, c.sub)
			helps[c.sub] = flags
		}
		if flags == nil {
			// The portal is built in parallel (issue 11): until it is in this binary its
			// flags are checked against SPEC.md by eye. Any other command must exist.
			if c.sub != "portal" {
				t.Errorf("%s: svc %s is not a command of the binary", c.where, c.sub)
			} else {
				t.Logf("%s: svc portal is not in this binary yet; its flags are unchecked", c.where)
			}
			continue
		}
		for _, f := range c.flags {
			if !slices.Contains(flags, f) {
				t.Errorf("%s: svc %s has no flag --%s (svc %s --help)", c.where, c.sub, f, c.sub)
			}
		}
	}
}

// command is one svc command line of a unit or manifest.
type command struct {
	where string // file (and object)
	sub   string
	flags []string // flag names without dashes
}

func parseArgs(where string, args []string) command {
	c := command{where: where}
	if len(args) > 0 {
		c.sub = args[0]
	}
	for _, a := range args[1:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			c.flags = append(c.flags, name)
		}
	}
	return c
}

// unitCommands reads the ExecStart lines of a unit (continuation lines joined).
func unitCommands(t *testing.T, path string) []command {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var out []command
	for _, line := range strings.Split(text, "\n") {
		v, ok := strings.CutPrefix(line, "ExecStart=")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 2 || f[0] != "/usr/local/bin/svc" {
			t.Errorf("%s: ExecStart %q does not run /usr/local/bin/svc", path, v)
			continue
		}
		out = append(out, parseArgs(path, f[1:]))
	}
	if len(out) != 1 {
		t.Errorf("%s: %d ExecStart lines, want 1", path, len(out))
	}
	return out
}

var helpFlagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// helpFlags lists the flags of `svc sub --help`; nil when sub is no command.
func helpFlags(t *testing.T, sub string) []string {
	t.Helper()
	out, _ := exec.Command(svcBin, sub, "--help").CombinedOutput()
	if bytes.Contains(out, []byte("unknown command")) {
		return nil
	}
	var flags []string
	for _, m := range helpFlagLine.FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) == 0 {
		t.Fatalf("svc %s --help lists no flags:\n%s", sub, out)
	}
	return flags
}
