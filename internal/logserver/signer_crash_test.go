package logserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

const crashSignerToken = "crash-signer-token-0123456789"

var signerAddrRE = regexp.MustCompile(`"msg":"signer started","addr":"http://([^"]+)"`)

// startSigner runs `svc signer` as its own process on keyPath and stateDir.
func startSigner(t *testing.T, keyPath, stateDir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(svcBin, "signer", "--key", keyPath, "--port", "0", "--token-env", "CRASH_SIGNER_TOKEN", "--state-dir", stateDir)
	cmd.Env = append(os.Environ(), "CRASH_SIGNER_TOKEN="+crashSignerToken)
	return cmd, "http://" + testkit.StartProcess(t, cmd, signerAddrRE)
}

// signRaw posts the head of tree at size for log "main", without a proof, as a log
// server that holds the token but lies would; it returns the status and the body.
func signRaw(t *testing.T, base string, tree *merkle.Tree, size uint64) (int, []byte) {
	t.Helper()
	root, err := tree.RootAt(size)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := receipt.TreeHeadPayload(receipt.TreeHead{TreeSize: size, RootHash: root.String(), Timestamp: receipt.FormatTime(time.Now()), Log: "main"})
	body, _ := json.Marshal(remote.SignRequest{PayloadType: receipt.PayloadTreeHead, Payload: payload})
	req, _ := http.NewRequest(http.MethodPost, base+"/sign", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+crashSignerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// TestSignerKill9RemembersEveryHeadAnswered kills `svc signer` with SIGKILL while a
// log signs a growing tree through it, restarts it on the same state directory, and
// checks that it still refuses to sign anything that does not extend the last head
// it answered before the crash: a smaller head (rollback) and another root at that
// size (fork), while the honest log goes on with a consistency proof.
func TestSignerKill9RemembersEveryHeadAnswered(t *testing.T) {
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	keyPath, _, err := key.WriteKeyFiles(dir, "log")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	cmd, base := startSigner(t, keyPath, state)
	c, err := remote.NewClient(context.Background(), base, crashSignerToken, remote.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	var answered uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			tree.Append(merkle.LeafHash(fmt.Appendf(nil, "leaf %d", i)))
			_, th, err := c.SignHeadOf(context.Background(), tree, "", "main", time.Now())
			if err != nil {
				return // the signer was killed
			}
			answered = th.TreeSize
		}
	}()
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	<-done
	if answered < 2 {
		t.Fatalf("only %d heads answered before SIGKILL", answered)
	}

	_, base = startSigner(t, keyPath, state)
	if code, body := signRaw(t, base, tree, answered-1); code != http.StatusConflict {
		t.Errorf("a head smaller than the last answered (%d): %d %s, want 409", answered, code, body)
	}
	fork, _ := merkle.NewTree(merkle.NewMemoryStore())
	for i := range answered {
		fork.Append(merkle.LeafHash(fmt.Appendf(nil, "forged %d", i)))
	}
	if code, body := signRaw(t, base, fork, answered); code != http.StatusConflict {
		t.Errorf("another root at the last answered size %d: %d %s, want 409", answered, code, body)
	}
	c2, err := remote.NewClient(context.Background(), base, crashSignerToken)
	if err != nil {
		t.Fatal(err)
	}
	tree.Append(merkle.LeafHash([]byte("after the restart")))
	if _, th, err := c2.SignHeadOf(context.Background(), tree, "", "main", time.Now()); err != nil || th.TreeSize != tree.Size() {
		t.Fatalf("the honest log after the restart: %+v %v", th, err)
	}
	t.Logf("%d heads answered before SIGKILL; none forgotten", answered)
}
