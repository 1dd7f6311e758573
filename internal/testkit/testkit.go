// Package testkit holds helpers that tests of several packages share. It is
// imported by tests only.
package testkit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// LockedBuffer is a bytes.Buffer that goroutines (a server, a command's stderr) write
// while the test reads it.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FlipLeafProxy serves target through a reverse proxy that flips one hex digit of the
// first leaf hash in every /leaves answer (leaves altered in transit) and returns the
// proxy's URL. It closes with the test.
func FlipLeafProxy(t testing.TB, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasSuffix(resp.Request.URL.Path, "/leaves") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if i := bytes.Index(body, []byte(`"leaves":["`)); i >= 0 && len(body) > i+20 {
			j := i + len(`"leaves":["`) + 7
			if body[j] == '0' {
				body[j] = '1'
			} else {
				body[j] = '0'
			}
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", fmt.Sprint(len(body)))
		return nil
	}
	s := httptest.NewServer(p)
	t.Cleanup(s.Close)
	return s.URL
}

// Eventually polls cond every 10 ms until it returns nil, and fails the test with
// cond's last error when within has passed: the one way tests wait for something
// that happens behind the call (a file written behind, a projection catching up).
func Eventually(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not so after %s: %v", within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FileIssuer is a receipt issuer of cfg that logs into a local log file and writes its
// receipts, both in a new temporary directory (cfg's Log and ReceiptsDir are set);
// the issuer, then the log, close with the test.
func FileIssuer(t testing.TB, cfg receipt.IssuerConfig) *receipt.Issuer {
	t.Helper()
	dir := t.TempDir()
	l, err := receipt.OpenFileLog(filepath.Join(dir, "log.jsonl"), cfg.Key, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cfg.Log, cfg.ReceiptsDir = l, filepath.Join(dir, "receipts")
	is, err := receipt.NewIssuer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { is.Close() }) // before the log's: cleanups run last first
	return is
}

// ClaimedCall is a call of tool by agent with args (JSON), every party claimed
// (no principal, session or model named): what an SDK issuer is handed.
func ClaimedCall(agent, tool, args string) receipt.Call {
	return receipt.Call{
		Principal: receipt.Principal{Provenance: receipt.Claimed},
		Agent:     receipt.Agent{ID: agent, Provenance: receipt.Claimed},
		Session:   receipt.Session{Provenance: receipt.Claimed},
		Model:     receipt.Model{Provenance: receipt.Claimed},
		Tool:      receipt.Tool{Name: tool, Provenance: receipt.Claimed},
		Args:      json.RawMessage(args),
	}
}

// Predicate decodes a bundle's receipt predicate, failing the test if it does not
// decode.
func Predicate(t testing.TB, b *receipt.Bundle) *receipt.Predicate {
	t.Helper()
	_, p, err := receipt.DecodeReceipt(b.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Do sends one request with an optional bearer token and body and returns the status,
// the headers and the body; a transport error fails the test.
func Do(t testing.TB, method, url, token, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, b := Send(t, req)
	return resp.StatusCode, resp.Header, b
}

// Send sends req with the default client and returns the response, its body already
// read and closed, and that body; a transport error fails the test. It is Do for a
// request that needs more than a bearer token (its own headers, a deadline).
func Send(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Broker starts an embedded nats-server (no TCP listener, no fsync) with the
// pipeline's streams for the test and returns a function that opens a new connection
// to it (one per simulated process); everything is closed when the test ends.
func Broker(t testing.TB) func() (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	connect := BareBroker(t)
	_, js := connect()
	if err := pipeline.EnsureStreams(context.Background(), js, pipeline.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return connect
}

// BareBroker is Broker without the pipeline's streams: nothing published to it is
// stored until the test makes a stream.
func BareBroker(t testing.TB) func() (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	connect := func() (*nats.Conn, jetstream.JetStream) {
		nc, err := natsembed.Connect(srv, "test", pipeline.Credentials{})
		if err != nil {
			t.Fatal(err)
		}
		return nc, JetStream(t, nc)
	}
	return connect
}

// JetStream is nc's JetStream API; nc closes when the test ends.
func JetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// BrokerPassword is the password of user natsembed.User on a ListeningBroker.
const BrokerPassword = "pw-of-tests"

// ListeningBroker starts an embedded nats-server (no fsync) listening on a free
// loopback port, admitting user natsembed.User with BrokerPassword
// (natsembed.URL(srv, BrokerPassword) logs in), for tests whose processes or clients
// dial it; it stops when the test ends.
func ListeningBroker(t testing.TB) *server.Server {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Password: BrokerPassword, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// AppendHashes appends the leaf hashes SHA-256(uint64 from..to, big-endian) to tenant
// over cl from 32 concurrent producers (so batches form); a refusal fails the test.
func AppendHashes(t testing.TB, cl *pipeline.Client, tenant string, from, to int) {
	t.Helper()
	var next atomic.Int64
	next.Store(int64(from) - 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(to) {
					return
				}
				if _, err := cl.Do(context.Background(), tenant, HashLeaf(int(i))); err != nil {
					t.Errorf("append %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// HashLeaf is the hash-only leaf SHA-256(i as 8 big-endian bytes).
func HashLeaf(i int) pipeline.Leaf {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return pipeline.Leaf{Hash: merkle.Hash(sha256.Sum256(b[:]))}
}

// ReadFileAs reads the file at path and parses it with parse (receipt.ParseBundle,
// client.ParseCheckpoint, ...), failing the test when either fails.
func ReadFileAs[T any](t testing.TB, path string, parse func([]byte) (T, error)) T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := parse(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// StreamInfo is stream's configuration, cluster and state (messages, last sequence,
// consumers), failing the test when the stream cannot be read.
func StreamInfo(t testing.TB, js jetstream.JetStream, stream string) *jetstream.StreamInfo {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}
