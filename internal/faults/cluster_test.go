package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// leaseHolder reads the process id out of tenant's sequencer lease ("host/pid/nanos").
func leaseHolder(ctx context.Context, js jetstream.JetStream, tenant string) (int, error) {
	kv, err := js.KeyValue(ctx, logservice.LeaseBucket)
	if err != nil {
		return 0, err
	}
	e, err := kv.Get(ctx, tenant)
	if err != nil {
		return 0, err
	}
	parts := strings.Split(string(e.Value()), "/")
	if len(parts) != 3 {
		return 0, fmt.Errorf("lease value %q", e.Value())
	}
	return strconv.Atoi(parts[1])
}

// svcProc is one `svc log` process in database mode, restarted like a supervisor
// (systemd Restart=always) would when it exits on its own.
type svcProc struct {
	name string
	args []string
	env  []string
	dir  string
	log  *testkit.LockedBuffer

	mu       sync.Mutex
	cmd      *exec.Cmd
	base     string
	port     int
	exits    int      // exits the test did not ask for
	reasons  []string // each such exit: when, and the last line the process wrote
	lastErr  string
	stopping bool
	done     chan struct{}
}

var listening = regexp.MustCompile(`msg="log server listening" addr=127\.0\.0\.1:(\d+)`)

func startProc(t testing.TB, name string, env []string, args ...string) *svcProc {
	t.Helper()
	p := &svcProc{name: name, args: args, env: env, dir: t.TempDir(), log: &testkit.LockedBuffer{}}
	if err := p.launch(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		p.stopping = true
		cmd, done := p.cmd, p.done
		p.mu.Unlock()
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() { // without the once-a-second checkpoint lines, which would fill the tail
			t.Logf("stderr of %s (checkpoint lines left out):\n%s", p.name, tail(withoutCheckpointLines(p.log.String()), 12000))
		}
		if dir := os.Getenv("SVC_FAULTS_LOGS"); dir != "" { // keep every process's stderr
			_ = os.WriteFile(filepath.Join(dir, p.name+".log"), []byte(p.log.String()), 0o644)
		}
	})
	return p
}

// withoutCheckpointLines is a process's stderr without its "checkpoint published"
// lines, so that what led to a failure stays in the tail the test prints.
func withoutCheckpointLines(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.Contains(l, `msg="checkpoint published"`) {
			b.WriteString(l)
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// launch starts the process (on the port of its previous life, if any) and waits
// for it to listen.
func (p *svcProc) launch() error {
	p.mu.Lock()
	port := p.port
	p.mu.Unlock()
	args := append([]string{"log", "--port", strconv.Itoa(port), "--data", filepath.Join(p.dir, "data")}, p.args...)
	cmd := exec.Command(svcPath, args...)
	cmd.Env = append(os.Environ(), p.env...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	addr := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(p.log, "%s %s\n", p.name, line)
			p.mu.Lock()
			p.lastErr = line // the last thing it said before an exit
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				select {
				case addr <- n:
				default:
				}
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(done)
		p.mu.Lock()
		again := !p.stopping && p.cmd == cmd
		if again {
			p.exits++
			p.reasons = append(p.reasons, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05.000"), p.name, tail(p.lastErr, 300)))
			fmt.Fprintf(p.log, "%s exited on its own (%s); restarting\n", p.name, cmd.ProcessState)
		}
		p.mu.Unlock()
		if again {
			time.Sleep(500 * time.Millisecond)
			_ = p.launch()
		}
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	select {
	case n := <-addr:
		p.mu.Lock()
		p.port, p.base = n, fmt.Sprintf("http://127.0.0.1:%d", n)
		p.mu.Unlock()
		return nil
	case <-done:
		return fmt.Errorf("%s exited before listening:\n%s", p.name, tail(p.log.String(), 3000))
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s did not listen within 60 s", p.name)
	}
}

// Base is the process's URL (empty while it is down).
func (p *svcProc) Base() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base
}

func (p *svcProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill9 kills the process with SIGKILL and starts it again after restartAfter, as a
// supervisor would.
func (p *svcProc) kill9(restartAfter time.Duration) error {
	return p.signalAndRestart(syscall.SIGKILL, restartAfter)
}

// signalAndRestart sends sig, waits for the exit and starts the process again after
// restartAfter.
func (p *svcProc) signalAndRestart(sig syscall.Signal, restartAfter time.Duration) error {
	if err := p.signal(sig); err != nil {
		return err
	}
	time.Sleep(restartAfter)
	return p.launch()
}

// signal sends sig and waits for the exit; the process stays down until launch.
func (p *svcProc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil // the waiter must not restart it: the test does
	p.base = ""
	p.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	<-done
	return nil
}

// ensureStreamsR3 fails the test unless every stream and bucket on the cluster has
// the replicas the processes were given.
func checkReplicas(t testing.TB, js jetstream.JetStream, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	n := 0
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "PROBE" {
			continue
		}
		n++
		if r := st.CachedInfo().Config.Replicas; r != want {
			t.Errorf("stream %s has %d replicas, want %d", name, r, want)
		}
	}
	for _, must := range []string{pipeline.AppendStream, pipeline.LeavesStream, pipeline.AdminStream, "KV_" + logservice.LeaseBucket} {
		if _, err := js.Stream(ctx, must); err != nil {
			t.Errorf("stream %s: %v", must, err)
		}
	}
	t.Logf("%d streams and buckets, each R%d", n, want)
}
