package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/witness"
)

// runOmniwitness: svc log sends its C2SP checkpoints to transparency-dev/witness's
// omniwitness (the log added through --additional_logs, its key a note signer key).
func runOmniwitness(r *report, dir, svcBin, omni string) error {
	const origin = "example.com/svc-omni-interop"
	const name = "omniwitness.interop.example/w1"
	keyPath, logVKey, err := logKey(dir, "omni-log", origin)
	if err != nil {
		return err
	}
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return err
	}
	parts := strings.Split(skey, "+") // PRIVATE+KEY+<name>+<hash>+base64(0x01 ‖ seed)
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil || len(raw) != 1+ed25519.SeedSize {
		return fmt.Errorf("note signer key: %v", err)
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	skeyPath, logsPath := filepath.Join(dir, "omni.sec"), filepath.Join(dir, "omni-logs.yaml")
	yaml := fmt.Sprintf("Logs:\n  - Origin: %s\n    PublicKey: %s\n    URL: http://127.0.0.1:1/\n", origin, logVKey)
	if err := os.WriteFile(skeyPath, []byte(skey), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(logsPath, []byte(yaml), 0o644); err != nil {
		return err
	}
	addr := freeAddr()
	args := []string{"--listen", addr, "--metrics_listen=", "--private_key_path", skeyPath, "--additional_logs", logsPath, "--alsologtostderr"}
	if _, err := r.startProc(dir, "omniwitness", nil, omni, args...); err != nil {
		return err
	}
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cosVKey := witness.CosignerVerifierKey(name, pub)
	r.say("- `omniwitness %s`, cosigner key `%s`", strings.Join(args, " "), cosVKey)
	return witnessedLog(r, dir, "svc-log-omni", svcBin, keyPath, origin, logVKey, "http://"+addr, cosVKey, "omniwitness")
}
