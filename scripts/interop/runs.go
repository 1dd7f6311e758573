package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer ln.Close()
	return ln.Addr().String()
}

// waitHTTP waits until url answers 200.
func waitHTTP(url string, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer 200 within %s", url, d)
}

func get(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return body, nil
}

// sshKey makes an Ed25519 key pair with ssh-keygen and returns its public key and
// SHA256 fingerprint.
func sshKey(dir string) (ed25519.PublicKey, string, error) {
	path := filepath.Join(dir, "lw")
	if out, err := exec.Command("ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-f", path).CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("ssh-keygen: %s", out)
	}
	pubLine, err := os.ReadFile(path + ".pub")
	if err != nil {
		return nil, "", err
	}
	f := strings.Fields(string(pubLine))
	blob, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil || len(blob) < 4+11+4+32 {
		return nil, "", fmt.Errorf("ssh public key %q", pubLine)
	}
	n := binary.BigEndian.Uint32(blob)
	pub := blob[4+n+4:]
	fp, err := exec.Command("ssh-keygen", "-lf", path+".pub").Output()
	if err != nil {
		return nil, "", err
	}
	return ed25519.PublicKey(pub), strings.Fields(string(fp))[1], nil
}

// startLitewitness runs an ssh-agent holding a fresh key and litewitness using it,
// witnessing origin with logVKey; it returns litewitness's URL and cosigner vkey.
func startLitewitness(r *report, dir, lw, ctl, origin, logVKey string) (string, string, error) {
	pub, fp, err := sshKey(dir)
	if err != nil {
		return "", "", err
	}
	sock := filepath.Join(dir, "agent.sock")
	if _, err := r.startProc(dir, "ssh-agent", nil, "ssh-agent", "-D", "-a", sock); err != nil {
		return "", "", err
	}
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	add := exec.Command("ssh-add", filepath.Join(dir, "lw"))
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("ssh-add: %s", out)
	}
	db := filepath.Join(dir, "litewitness.db")
	const name = "litewitness.interop.example/w1"
	addr := freeAddr()
	if _, err := r.startProc(dir, "litewitness", nil, lw, "-db", db, "-name", name, "-key", fp, "-ssh-agent", sock, "-listen", addr); err != nil {
		return "", "", err
	}
	for i := 0; i < 100; i++ { // litewitness creates its database's tables at start
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := addLog(ctl, db, origin, logVKey); err != nil {
		return "", "", err
	}
	return "http://" + addr, witness.CosignerVerifierKey(name, pub), nil
}

// addLog tells litewitness of a log: witnessctl add-log and add-key, or with ctl
// "sqlite3" the same two INSERTs witnessctl makes (a log at size 0 with the empty
// tree's hash, and its verifier key).
func addLog(ctl, db, origin, logVKey string) error {
	if ctl == "sqlite3" {
		const emptyTree = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=" // SHA-256 of nothing
		q := fmt.Sprintf("INSERT INTO log (origin, tree_size, tree_hash) VALUES ('%s', 0, '%s'); INSERT INTO key (origin, key) VALUES ('%s', '%s');",
			origin, emptyTree, origin, logVKey)
		if out, err := exec.Command("sqlite3", db, q).CombinedOutput(); err != nil {
			return fmt.Errorf("sqlite3: %s", out)
		}
		return nil
	}
	for _, args := range [][]string{{"add-log", "-db", db, "-origin", origin}, {"add-key", "-db", db, "-origin", origin, "-key", logVKey}} {
		if out, err := exec.Command(ctl, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("witnessctl %s: %s", args[0], out)
		}
	}
	return nil
}

// logKey makes svc log's key for origin: its file and its note verifier key.
func logKey(dir, name, origin string) (keyPath, vkey string, err error) {
	key, err := signer.GenerateKey()
	if err != nil {
		return "", "", err
	}
	if keyPath, _, err = key.WriteKeyFiles(dir, name); err != nil {
		return "", "", err
	}
	vkey, err = note.NewEd25519VerifierKey(origin, key.Public().Key)
	return keyPath, vkey, err
}

// runLitewitness: svc log (file mode, in-process key) sends its C2SP checkpoints to
// litewitness and publishes the cosignatures at /checkpoint.
func runLitewitness(r *report, dir, svcBin, lw, ctl string) error {
	const origin = "example.com/svc-interop"
	keyPath, logVKey, err := logKey(dir, "log", origin)
	if err != nil {
		return err
	}
	lwURL, cosVKey, err := startLitewitness(r, dir, lw, ctl, origin, logVKey)
	if err != nil {
		return err
	}
	r.say("- litewitness at %s, cosigner key `%s`", lwURL, cosVKey)
	return witnessedLog(r, dir, "svc-log", svcBin, keyPath, origin, logVKey, lwURL, cosVKey, "litewitness")
}

// witnessedLog runs svc log sending its checkpoints to the witness at wURL, appends
// twice and waits each time for a checkpoint that witness cosigned.
func witnessedLog(r *report, dir, name, svcBin, keyPath, origin, logVKey, wURL, cosVKey, peer string) error {
	addr := freeAddr()
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"log", "--file", filepath.Join(dir, name+".jsonl"), "--key", keyPath, "--log-id", origin, "--port", port,
		"--data", filepath.Join(dir, name+"-data"), "--checkpoint-every", "1", "--witness-add-checkpoint", wURL}
	if _, err := r.startProc(dir, name, nil, svcBin, args...); err != nil {
		return err
	}
	base := "http://" + addr
	if err := waitHTTP(base+"/health", 30*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(dir, name))
	}
	r.say("- `svc %s`", strings.Join(args, " "))
	logV, _ := note.NewVerifier(logVKey)
	for _, n := range []int{50, 120} {
		if err := addEntries(base, n); err != nil {
			return err
		}
		t0 := time.Now()
		size, err := waitCosigned(base+"/checkpoint", uint64(n), logV, cosVKey, 30*time.Second)
		if err != nil {
			return fmt.Errorf("%w\n%s: %s\nsvc log: %s", err, peer, logTail(dir, peer), logTail(dir, name))
		}
		r.say("- svc's checkpoint at size %d cosigned by %s %s after the log reached it; the note verifies with x/mod's note (log key and %s's cosignature/v1 key)", size, peer, time.Since(t0).Round(time.Millisecond), peer)
	}
	return nil
}

// addEntries appends n entries through POST /add (more leaves each call: the callers
// wait for a checkpoint of at least n, which the log then has).
func addEntries(base string, n int) error {
	for i := 0; i < n; i++ {
		resp, err := http.Post(base+"/add", "text/plain", strings.NewReader("interop entry "+strconv.Itoa(i)))
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("POST /add: %d %s", resp.StatusCode, body)
		}
	}
	return nil
}

// waitCosigned polls a C2SP checkpoint until one of at least size carries a valid
// cosignature of cosVKey beside the log's signature; it returns its size.
func waitCosigned(url string, size uint64, logV note.Verifier, cosVKey string, d time.Duration) (uint64, error) {
	cosV, err := witness.NewCosignatureVerifier(cosVKey)
	if err != nil {
		return 0, err
	}
	end := time.Now().Add(d)
	var last error
	for time.Now().Before(end) {
		data, err := get(url)
		if err == nil {
			var n *note.Note
			if n, err = note.Open(data, note.VerifierList(logV, cosV)); err == nil && len(n.Sigs) == 2 {
				got, _, err := witness.ParseCheckpointBody(n.Text)
				if err == nil && got >= size {
					return got, nil
				}
			}
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return 0, fmt.Errorf("no checkpoint of size >= %d cosigned within %s (last: %v)", size, d, last)
}
