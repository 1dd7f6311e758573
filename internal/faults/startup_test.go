package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
)

// plainProc is one `svc log` process the test starts and watches itself: unlike
// svcProc it is not restarted when it exits (an exit is the failure looked for), and
// its port is chosen before it listens, so /health can be asked while it starts.
type plainProc struct {
	t    testing.TB
	args []string
	env  []string
	base string
	port int
	log  *testkit.LockedBuffer
	cmd  *exec.Cmd
	done chan struct{}
	// started: the cleanup that stops it is registered
	started bool
}

func newPlainProc(t testing.TB, env []string, args ...string) *plainProc {
	p := &plainProc{t: t, args: args, env: env, port: testkit.FreePorts(t, 1)[0], log: &testkit.LockedBuffer{}}
	p.base = fmt.Sprintf("http://127.0.0.1:%d", p.port)
	return p
}

// start starts the process without waiting for anything.
func (p *plainProc) start() {
	p.t.Helper()
	p.cmd = exec.Command(svcPath, append([]string{"log", "--port", strconv.Itoa(p.port)}, p.args...)...)
	p.cmd.Env = append(os.Environ(), p.env...)
	pr, pw := io.Pipe()
	p.cmd.Stderr, p.cmd.Stdout = pw, io.Discard
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(p.log, sc.Text())
		}
	}()
	cmd, done := p.cmd, p.done
	go func() { _ = cmd.Wait(); pw.Close(); close(done) }()
	if p.started {
		return
	}
	p.started = true
	p.t.Cleanup(func() {
		p.stop()
		if p.t.Failed() {
			p.t.Logf("svc log's stderr:\n%s", tail(p.log.String(), 8000))
		}
	})
}

// stop ends the process with SIGTERM (SIGKILL after 10 s) and waits for it.
func (p *plainProc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// alive fails the test if the process exited.
func (p *plainProc) alive(when string) {
	p.t.Helper()
	select {
	case <-p.done:
		p.t.Fatalf("svc log exited %s (%s):\n%s", when, p.cmd.ProcessState, tail(p.log.String(), 4000))
	default:
	}
}

// health is /health's status and error text ("" when it did not answer).
func (p *plainProc) health() (int, string) {
	resp, err := http.Get(p.base + "/health")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var body struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body)
	return resp.StatusCode, body.Error
}

// appendLeaf appends leaf to the default log with token.
func (p *plainProc) appendLeaf(token, leaf string) error {
	body, _ := json.Marshal(map[string]string{"leaf": leaf})
	req, _ := http.NewRequest(http.MethodPost, p.base+"/append", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("append %s: %d %s", leaf, resp.StatusCode, data)
	}
	return nil
}

// fileModeLog is `svc log --file` on the cluster with --replicas 3 and an in-process
// key, and its token.
func fileModeLog(t *testing.T, c *cluster, dir string) (*plainProc, string) {
	t.Helper()
	if out, err := exec.Command(svcPath, "keygen", "--dir", dir, "--name", "log").CombinedOutput(); err != nil {
		t.Fatalf("svc keygen: %v\n%s", err, out)
	}
	token := "file-mode-token-0123456789abcdef"
	p := newPlainProc(t, []string{"TEST_LOG_TOKEN=" + token}, "--file", filepath.Join(dir, "log.jsonl"), "--key", filepath.Join(dir, "log.key"),
		"--token-env", "TEST_LOG_TOKEN", "--data", filepath.Join(dir, "data"), "--nats-url", c.URLs(), "--replicas", "3", "--checkpoint-every", "1")
	return p, token
}

// TestStartWithoutQuorum: `svc log` started while its cluster has no quorum waits
// instead of exiting — /health answers 503 naming what it waits for — and serves once
// a node returns. First on a new cluster with two of three nodes killed (kill -9; the
// streams are then created), then on one whose streams exist with two nodes hung
// (SIGSTOP; the streams are looked up: the start that ended a restarted process on
// "JetStream system temporarily unavailable"). Hung, not killed, the second time:
// SVC_APPEND is a memory stream, and one whose replicas died on two nodes at once
// found no leader for minutes after one came back (nats-server 2.15.2), an outage of
// the broker that no client can shorten.
func TestStartWithoutQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := startCluster(t, 3)
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range c.logs {
				if l != nil {
					var keep []string
					for _, line := range strings.Split(l.String(), "\n") {
						if !strings.Contains(line, "Route connection created") && !strings.Contains(line, "Router connection closed") {
							keep = append(keep, line)
						}
					}
					t.Logf("node n%d:\n%s", i, tail(strings.Join(keep, "\n"), 6000))
				}
			}
		}
	})
	p, token := fileModeLog(t, c, t.TempDir())
	rounds := []struct {
		what       string
		lose, heal func(int)
	}{
		{"new cluster, two nodes killed (kill -9): creating its streams", c.kill9, c.start},
		{"existing streams, two nodes hung (SIGSTOP): looking its streams up", c.pause, c.resume},
	}
	for round, r := range rounds {
		c.healthy(60 * time.Second)
		r.lose(1)
		r.lose(2)
		p.start()
		testkit.Eventually(t, 30*time.Second, func() error {
			p.alive("at start without quorum")
			code, msg := p.health()
			if code != http.StatusServiceUnavailable || !strings.Contains(msg, "starting") {
				return fmt.Errorf("/health: %d %q, want 503 saying the log is starting", code, msg)
			}
			if !strings.Contains(p.log.String(), "the broker is not ready; retrying") {
				return fmt.Errorf("no retry logged yet")
			}
			return nil
		})
		time.Sleep(3 * time.Second) // longer than the start's backoff: it still waits
		p.alive("while the cluster had no quorum")
		r.heal(1)
		testkit.Eventually(t, 90*time.Second, func() error {
			p.alive("after a node returned")
			return p.appendLeaf(token, fmt.Sprintf("after the quorum returned, round %d", round))
		})
		t.Logf("%s: waited without quorum, then served", r.what)
		r.heal(2)
		p.stop()
	}
}

// TestFileModeSurvivesBrokerLoss: `svc log --file --nats-url` under appends while a
// node is killed with kill -9, then the whole broker (every node), stays up and
// serves again once the cluster is back; every acknowledged leaf is in the log file
// afterwards.
func TestFileModeSurvivesBrokerLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := startCluster(t, 3)
	dir := t.TempDir()
	p, token := fileModeLog(t, c, dir)
	p.start()
	var acked []string
	appendSome := func(what string, within time.Duration) {
		t.Helper()
		testkit.Eventually(t, within, func() error {
			p.alive(what)
			leaf := fmt.Sprintf("%s %d", what, len(acked))
			if err := p.appendLeaf(token, leaf); err != nil {
				return err
			}
			acked = append(acked, leaf)
			return nil
		})
	}
	appendSome("before the faults", 60*time.Second)
	for i := range 3 { // the node leading the streams is among them
		c.healthy(60 * time.Second)
		c.kill9(i)
		appendSome(fmt.Sprintf("node n%d killed", i), 60*time.Second)
		c.start(i)
		appendSome(fmt.Sprintf("node n%d back", i), 60*time.Second)
	}
	for i := range 3 {
		c.kill9(i)
	}
	for range 2 { // appends fail meanwhile; the process must not exit
		time.Sleep(3 * time.Second)
		p.alive("with every node down")
		_ = p.appendLeaf(token, "while the broker is down")
	}
	for i := range 3 {
		c.start(i)
	}
	appendSome("the broker back", 120*time.Second)
	p.alive("at the end")
	testkit.Eventually(t, 30*time.Second, func() error {
		data, err := os.ReadFile(filepath.Join(dir, "log.jsonl"))
		if err != nil {
			return err
		}
		for _, leaf := range acked {
			if !bytes.Contains(data, []byte(strconv.Quote(leaf))) {
				return fmt.Errorf("acknowledged leaf %q not in the log file", leaf)
			}
		}
		return nil
	})
}
