package client_test

import (
	"testing"

	"svc.dev/svc/client"
)

// TestCheckpointURLs: the one layout of published checkpoints, a log's and a
// witness's alike: <base>/<tenant>/<size>.json and <base>/<tenant>/latest.json.
func TestCheckpointURLs(t *testing.T) {
	if got := client.CheckpointURL("https://w.example/out/", "acme", 42); got != "https://w.example/out/acme/42.json" {
		t.Errorf("CheckpointURL = %s", got)
	}
	if got := client.LatestCheckpointURL("https://w.example", "default"); got != "https://w.example/default/latest.json" {
		t.Errorf("LatestCheckpointURL = %s", got)
	}
}
