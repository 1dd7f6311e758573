package pipeline_test

import (
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/signer"
)

// TestOpenLog: the one opener of a producer's log (the gateway's and the SDK's) opens a
// local file, or an HTTP log with its by-hash twin and the append cap, and refuses an
// unset token variable naming the field and the variable.
func TestOpenLog(t *testing.T) {
	key, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "receipts.log")
	l, err := pipeline.OpenLog(file, nil, pipeline.LogOptions{Key: key})
	if err != nil || l.Kind != pipeline.LogKindFile || l.Where != file || l.ByHash != nil || l.Fits != nil {
		t.Fatalf("file: %+v, %v", l, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	c := &pipeline.LogConfig{URL: "http://127.0.0.1:1/t/acme/append"}
	h, err := pipeline.OpenLog("", c, pipeline.LogOptions{})
	if err != nil || h.Kind != pipeline.LogKindHTTP || h.ByHash == nil || h.Fits == nil {
		t.Fatalf("http: %+v, %v", h, err)
	}
	if !h.Fits([]byte(strings.Repeat("a", pipeline.MaxLeafBytes-len(`{"leaf":""}`)))) || h.Fits([]byte(strings.Repeat("a", pipeline.MaxLeafBytes))) {
		t.Fatal("Fits does not hold the append body to MaxLeafBytes")
	}
	c.HashOnly = true
	if h, err = pipeline.OpenLog("", c, pipeline.LogOptions{}); err != nil || h.ByHash != nil || h.Fits != nil {
		t.Fatalf("hashOnly: %+v, %v", h, err)
	}

	c.TokenEnv = "SVC_TEST_UNSET_LOG_TOKEN"
	_, err = pipeline.OpenLog("", c, pipeline.LogOptions{Getenv: func(string) (string, bool) { return "", false }})
	if err == nil || err.Error() != "log.tokenEnv: environment variable SVC_TEST_UNSET_LOG_TOKEN is not set" {
		t.Fatalf("unset token: %v", err)
	}
}
