package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// gatewayRig is a real `svc gateway` over stdio in front of the npm filesystem server
// (e2e/node_modules), pre-committing write_file to a tenant of the cluster's log, driven
// by the Go MCP client as an agent would.
type gatewayRig struct {
	c    *client.Client
	root string // the directory the filesystem server may write
}

func nodeModules(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	nm := filepath.Join(filepath.Dir(file), "..", "..", "e2e", "node_modules")
	if _, err := os.Stat(filepath.Join(nm, "@modelcontextprotocol", "server-filesystem", "dist", "index.js")); err != nil {
		t.Fatalf("server-filesystem is not installed: run `npm ci --prefix e2e`: %v", err)
	}
	return nm
}

func (r *rig) startGateway(tenant string) *gatewayRig {
	t := r.t
	t.Helper()
	nm := nodeModules(t)
	dir, root := t.TempDir(), t.TempDir()
	alice, _ := signer.GenerateKey()
	gw, _ := signer.GenerateKey()
	for name, k := range map[string]*signer.Key{"alice": alice, "gateway": gw} {
		if _, _, err := k.WriteKeyFiles(dir, name); err != nil {
			t.Fatal(err)
		}
	}
	grant, err := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "fault-agent", []string{"write_file"}, time.Now().Add(-time.Minute), time.Hour, nil, nil), alice)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(grant)
	must(t, os.WriteFile(filepath.Join(dir, "grant.json"), data, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644))
	cfg := map[string]any{
		"identity":             map[string]any{"keyFile": "gateway.key"},
		"upstream":             map[string]any{"command": "node", "args": []string{filepath.Join(nm, "@modelcontextprotocol", "server-filesystem", "dist", "index.js"), root}},
		"grantFile":            "grant.json",
		"trustedPrincipalKeys": []string{"alice.pub"},
		"policyFile":           "policy.cedar",
		"precommit":            []string{"write_file"},
		"receiptsDir":          "receipts",
		"log":                  map[string]any{"url": r.procs[0].Base() + "/t/" + tenant + "/append", "tokenEnv": "FAULTS_LOG_TOKEN", "timeoutMs": 3000},
	}
	data, _ = json.MarshalIndent(cfg, "", "  ")
	config := filepath.Join(dir, "gateway.json")
	must(t, os.WriteFile(config, data, 0o644))
	cmd := exec.Command(svcPath, "gateway", "--config", config)
	cmd.Env = append(os.Environ(), "FAULTS_LOG_TOKEN="+r.load.tokens[tenant][0])
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr := &testkit.LockedBuffer{}
	cmd.Stderr = stderr
	must(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stderr of svc gateway:\n%s", tail(stderr.String(), 3000))
		}
	})
	c := client.NewClient(transport.NewIO(stdout, stdin, nil))
	must(t, c.Start(context.Background()))
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatalf("initialize the gateway: %v\n%s", err, stderr.String())
	}
	return &gatewayRig{c: c, root: root}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// write asks the gateway to write name; it returns the result's text and whether
// the result is an error.
func (g *gatewayRig) write(t testing.TB, name, content string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = "write_file"
	req.Params.Arguments = map[string]any{"path": filepath.Join(g.root, name), "content": content}
	res, err := g.c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("write_file %s: %v", name, err)
	}
	var s []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			s = append(s, tc.Text)
		}
	}
	return strings.Join(s, "\n"), res.IsError
}

// withheldWhileSignerDown: with the signer down, a pre-committed write_file through
// the gateway must not reach the filesystem server (no file) and the agent gets the
// gateway's "Not executed" error; called with the signer back, it is written.
func (g *gatewayRig) withheldWhileSignerDown(t testing.TB) {
	t.Helper()
	text, isErr := g.write(t, "withheld.txt", "must not be written")
	if !isErr || !strings.HasPrefix(text, "Not executed: the log did not commit the authorization") {
		t.Errorf("pre-committed write with the signer down: error %v, %q", isErr, text)
	}
	if _, err := os.Stat(filepath.Join(g.root, "withheld.txt")); !os.IsNotExist(err) {
		t.Errorf("the upstream wrote withheld.txt although the log did not commit the authorization (%v)", err)
	}
}

// worksAgain waits until a pre-committed write goes through and the file holds it.
func (g *gatewayRig) worksAgain(t testing.TB, within time.Duration) {
	t.Helper()
	n := 0
	testkit.Eventually(t, within, func() error {
		n++
		name := fmt.Sprintf("after-%d.txt", n)
		if text, isErr := g.write(t, name, "written"); isErr {
			return fmt.Errorf("write_file: %s", text)
		}
		got, err := os.ReadFile(filepath.Join(g.root, name))
		if err != nil || string(got) != "written" {
			return fmt.Errorf("%s after a successful call: %q %v", name, got, err)
		}
		return nil
	})
}
