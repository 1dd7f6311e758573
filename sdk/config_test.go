package sdk_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/sdk"
)

func baseConfig() map[string]any {
	return map[string]any{
		"identity":    map[string]any{"keyFile": "keys/agent.key"},
		"agentId":     "billing-bot",
		"framework":   "langchain",
		"receiptsDir": "receipts",
		"logFile":     "receipts.log",
	}
}

func TestParseConfigResolvesRelativePaths(t *testing.T) {
	c := baseConfig()
	c["policyFile"] = "policy.cedar"
	c["principalId"] = "alice"
	c["otel"] = map[string]any{"url": "http://127.0.0.1:4318", "headersEnv": map[string]string{"Authorization": "OTEL_AUTH"}, "serviceName": "agents"}
	c["splunk"] = map[string]any{"url": "https://hec.example:8088", "tokenEnv": "HEC_TOKEN", "index": "main"}
	data, _ := json.Marshal(c)
	got, err := sdk.ParseConfig(data, "/etc/agent")
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity.KeyFile != "/etc/agent/keys/agent.key" || got.PolicyFile != "/etc/agent/policy.cedar" ||
		got.ReceiptsDir != "/etc/agent/receipts" || got.LogFile != "/etc/agent/receipts.log" {
		t.Fatalf("paths not resolved: %+v", got)
	}
	if *got.PrincipalID != "alice" || got.OTel.ServiceName != "agents" || got.Splunk.Index != "main" {
		t.Fatalf("%+v", got)
	}
	c["receiptsDir"] = "/var/receipts"
	data, _ = json.Marshal(c)
	if got, _ := sdk.ParseConfig(data, "/etc/agent"); got.ReceiptsDir != "/var/receipts" {
		t.Fatalf("absolute path changed: %s", got.ReceiptsDir)
	}
}

// Every misconfiguration is refused with a message naming the field.
func TestParseConfigRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no key", func(c map[string]any) { delete(c, "identity") }, "identity.keyFile is required"},
		{"no agent", func(c map[string]any) { delete(c, "agentId") }, "agentId is required"},
		{"blank agent", func(c map[string]any) { c["agentId"] = "  " }, "agentId is required"},
		{"empty principal", func(c map[string]any) { c["principalId"] = "" }, "principalId is empty"},
		{"no framework", func(c map[string]any) { delete(c, "framework") }, "framework is required"},
		{"no receipts dir", func(c map[string]any) { delete(c, "receiptsDir") }, "receiptsDir is required"},
		{"both logs", func(c map[string]any) { c["log"] = map[string]any{"url": "http://x/append"} }, "both logFile and log"},
		{"no log", func(c map[string]any) { delete(c, "logFile") }, "neither logFile nor log"},
		{"log url and nats", func(c map[string]any) {
			delete(c, "logFile")
			c["log"] = map[string]any{"url": "http://x/append", "nats": "nats://x:4222"}
		}, "log: both url and nats"},
		{"log empty", func(c map[string]any) { delete(c, "logFile"); c["log"] = map[string]any{} }, "log: give url"},
		{"log url scheme", func(c map[string]any) { delete(c, "logFile"); c["log"] = map[string]any{"url": "ftp://x/append"} }, "log.url"},
		{"log timeout", func(c map[string]any) {
			delete(c, "logFile")
			c["log"] = map[string]any{"url": "http://x/append", "timeoutMs": 0}
		}, "log.timeoutMs"},
		{"log tenant on http", func(c map[string]any) {
			delete(c, "logFile")
			c["log"] = map[string]any{"url": "http://x/append", "tenant": "acme"}
		}, "log.tenant is only for log.nats"},
		{"log token env", func(c map[string]any) {
			delete(c, "logFile")
			c["log"] = map[string]any{"url": "http://x/append", "tokenEnv": "A B"}
		}, "log.tokenEnv"},
		{"nats scheme", func(c map[string]any) { delete(c, "logFile"); c["log"] = map[string]any{"nats": "http://x:4222"} }, "log.nats"},
		{"nats tenant", func(c map[string]any) {
			delete(c, "logFile")
			c["log"] = map[string]any{"nats": "nats://x:4222", "tenant": "Acme!"}
		}, "log.tenant"},
		{"otel url", func(c map[string]any) { c["otel"] = map[string]any{} }, "otel.url is required"},
		{"otel header", func(c map[string]any) {
			c["otel"] = map[string]any{"url": "http://c:4318", "headersEnv": map[string]string{"Bad Header": "X"}}
		}, "otel.headersEnv"},
		{"splunk token", func(c map[string]any) { c["splunk"] = map[string]any{"url": "http://s:8088"} }, "splunk.tokenEnv is required"},
		{"splunk url", func(c map[string]any) { c["splunk"] = map[string]any{"url": "s:8088", "tokenEnv": "T"} }, "splunk.url"},
		{"unknown field", func(c map[string]any) { c["recieptsDir"] = "x" }, `unknown field "recieptsDir"`},
		{"wrong type", func(c map[string]any) { c["agentId"] = 7 }, "agentId"},
		{"nested wrong type", func(c map[string]any) { c["identity"] = map[string]any{"keyFile": true} }, "identity.keyFile"},
	}
	for _, c := range cases {
		cfg := baseConfig()
		c.edit(cfg)
		data, _ := json.Marshal(cfg)
		_, err := sdk.ParseConfig(data, "/d")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	for text, want := range map[string]string{``: "empty", `{} {}`: "after the JSON object", `[1]`: "", `{"agentId":`: ""} {
		_, err := sdk.ParseConfig([]byte(text), "/d")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", text, err, want)
		}
	}
}

// Open refuses what only shows outside the text: a missing key, policy or variable.
func TestOpenRefusals(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir, 5)
	writeFile(t, filepath.Join(dir, "bad.cedar"), `permit (principal, action, resource`)
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"missing key file", func(c map[string]any) { c["identity"] = map[string]any{"keyFile": "nope.key"} }, "identity.keyFile"},
		{"bad policy", func(c map[string]any) { c["policyFile"] = "bad.cedar" }, "policyFile"},
		{"missing policy", func(c map[string]any) { c["policyFile"] = "absent.cedar" }, "policyFile"},
		{"log token unset", func(c map[string]any) {
			delete(c, "logFile")
			c["log"] = map[string]any{"url": "http://127.0.0.1:1/append", "tokenEnv": "SDK_TEST_UNSET_TOKEN"}
		}, "log.tokenEnv: environment variable SDK_TEST_UNSET_TOKEN is not set"},
		{"otel header unset", func(c map[string]any) {
			c["otel"] = map[string]any{"url": "http://127.0.0.1:1", "headersEnv": map[string]string{"Authorization": "SDK_TEST_UNSET_H"}}
		}, "otel.headersEnv.Authorization: environment variable SDK_TEST_UNSET_H is not set"},
		{"splunk token unset", func(c map[string]any) {
			c["splunk"] = map[string]any{"url": "http://127.0.0.1:1", "tokenEnv": "SDK_TEST_UNSET_T"}
		}, "splunk.tokenEnv: environment variable SDK_TEST_UNSET_T is not set"},
		{"nats unreachable", func(c map[string]any) { delete(c, "logFile"); c["log"] = map[string]any{"nats": "nats://127.0.0.1:1"} }, "log.nats"},
	}
	for _, c := range cases {
		cfg := baseConfig()
		c.edit(cfg)
		cfg2, err := sdk.LoadConfig(writeConfig(t, dir, cfg))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		is, err := sdk.Open(context.Background(), cfg2, sdk.OpenOptions{Getenv: func(string) (string, bool) { return "", false }})
		if err == nil {
			is.Close(context.Background())
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
