package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

// fakeSigner publishes key's document at /keys and answers /sign with whatever
// answer returns, so a test can play a signer that lies.
func fakeSigner(t *testing.T, key *signer.Key, answer func(w http.ResponseWriter, r *http.Request, req remote.SignRequest)) *httptest.Server {
	t.Helper()
	doc, _ := json.Marshal(signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(validFrom, nil)}})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/keys":
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
		case "/sign":
			var req remote.SignRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			answer(w, r, req)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	return hs
}

func writeEnvelope(w http.ResponseWriter, env *receipt.Envelope) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(env)
}

// The client never trusts the signer's answer: each lie below is refused with
// ErrBadResponse, while the honest answer passes.
func TestClientVerifiesTheAnswer(t *testing.T) {
	key, other := seedKey(t, 1), seedKey(t, 2)
	payload := treeHead(t, 5, "main")
	cases := map[string]func(w http.ResponseWriter, r *http.Request, req remote.SignRequest){
		"signed by another key": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			writeEnvelope(w, receipt.Sign(req.PayloadType, req.Payload, other))
		},
		"another key claiming the signer's keyid": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			env := receipt.Sign(req.PayloadType, req.Payload, other)
			env.Signatures[0].KeyID = key.KeyID()
			writeEnvelope(w, env)
		},
		"payload altered and signed": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			writeEnvelope(w, receipt.Sign(req.PayloadType, treeHead(t, 999, "main"), key))
		},
		"payload altered after signing": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			env := receipt.Sign(req.PayloadType, req.Payload, key)
			env.Payload = treeHead(t, 999, "main")
			writeEnvelope(w, env)
		},
		"payload type altered": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			writeEnvelope(w, receipt.Sign(receipt.PayloadInToto, req.Payload, key))
		},
		"signature flipped": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			env := receipt.Sign(req.PayloadType, req.Payload, key)
			env.Signatures[0].Sig[0] ^= 1
			writeEnvelope(w, env)
		},
		"no signature": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			writeEnvelope(w, receipt.Sign(req.PayloadType, req.Payload))
		},
		"two signatures": func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
			writeEnvelope(w, receipt.Sign(req.PayloadType, req.Payload, key, other))
		},
		"not an envelope": func(w http.ResponseWriter, _ *http.Request, _ remote.SignRequest) {
			w.Write([]byte(`{"ok":true}`))
		},
		"not JSON": func(w http.ResponseWriter, _ *http.Request, _ remote.SignRequest) {
			w.Write([]byte(`<html>hello</html>`))
		},
	}
	for name, answer := range cases {
		hs := fakeSigner(t, key, answer)
		c := newClient(t, hs.URL, testToken)
		env, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, payload)
		if !errors.Is(err, remote.ErrBadResponse) || env != nil {
			t.Errorf("%s: %v, %v; want ErrBadResponse", name, env, err)
		}
		if errors.Is(err, receipt.ErrLogUnavailable) {
			t.Errorf("%s: a lying signer reported as an outage: %v", name, err)
		}
	}
	// The honest fake passes, so the refusals above are the checks, not the fake.
	honest := fakeSigner(t, key, func(w http.ResponseWriter, _ *http.Request, req remote.SignRequest) {
		writeEnvelope(w, receipt.Sign(req.PayloadType, req.Payload, key))
	})
	if _, err := newClient(t, honest.URL, testToken).SignEnvelope(context.Background(), receipt.PayloadTreeHead, payload); err != nil {
		t.Errorf("honest signer: %v", err)
	}
}

// The token goes to /sign only: not to the open /keys, and never along a redirect.
func TestClientTokenGoesOnlyToSign(t *testing.T) {
	var leaked atomic.Value
	leaked.Store("")
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
	}))
	defer elsewhere.Close()
	key := seedKey(t, 1)
	var keysAuth atomic.Value
	keysAuth.Store("")
	doc, _ := json.Marshal(signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(validFrom, nil)}})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			keysAuth.Store(r.Header.Get("Authorization"))
			w.Write(doc)
			return
		}
		http.Redirect(w, r, elsewhere.URL+"/sign", http.StatusTemporaryRedirect)
	}))
	defer hs.Close()
	c := newClient(t, hs.URL, testToken)
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main")); !errors.Is(err, remote.ErrBadResponse) {
		t.Errorf("redirect: %v", err)
	}
	if got := leaked.Load().(string); got != "" {
		t.Errorf("the redirect target received Authorization %q", got)
	}
	if got := keysAuth.Load().(string); got != "" {
		t.Errorf("GET /keys carried Authorization %q", got)
	}
}

// A signer that does not answer in time is an outage: receipt.ErrLogUnavailable.
func TestClientTimeoutIsLogUnavailable(t *testing.T) {
	key := seedKey(t, 1)
	var slowKeys atomic.Bool
	doc, _ := json.Marshal(signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(validFrom, nil)}})
	stop := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" && !slowKeys.Load() {
			w.Write(doc)
			return
		}
		io.Copy(io.Discard, r.Body) // so the server notices the client hanging up
		select {                    // sleep past the client's timeout, but not past the test
		case <-r.Context().Done():
		case <-stop:
		case <-time.After(5 * time.Second):
		}
	}))
	defer hs.Close()
	defer close(stop)

	c := newClient(t, hs.URL, testToken, remote.WithTimeout(100*time.Millisecond))
	start := time.Now()
	_, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main"))
	if !errors.Is(err, receipt.ErrLogUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow /sign: %v, want ErrLogUnavailable wrapping a deadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timeout took %v", d)
	}
	slowKeys.Store(true)
	_, err = remote.NewClient(context.Background(), hs.URL, testToken, remote.WithTimeout(100*time.Millisecond))
	if !errors.Is(err, receipt.ErrLogUnavailable) {
		t.Errorf("slow /keys at start-up: %v", err)
	}
	// The caller's own deadline is honoured too.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.SignEnvelope(ctx, receipt.PayloadTreeHead, treeHead(t, 1, "main")); !errors.Is(err, receipt.ErrLogUnavailable) {
		t.Errorf("caller deadline: %v", err)
	}
}

func TestClientOutagesAreLogUnavailable(t *testing.T) {
	key := seedKey(t, 1)
	var status atomic.Int32
	status.Store(503)
	hs := fakeSigner(t, key, func(w http.ResponseWriter, _ *http.Request, _ remote.SignRequest) {
		w.WriteHeader(int(status.Load()))
		w.Write([]byte(`{"error":"disk on fire"}`))
	})
	c := newClient(t, hs.URL, testToken)
	for _, code := range []int32{500, 502, 503} {
		status.Store(code)
		_, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main"))
		if !errors.Is(err, receipt.ErrLogUnavailable) || !strings.Contains(err.Error(), "disk on fire") {
			t.Errorf("%d: %v", code, err)
		}
	}
	status.Store(400)
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main")); !errors.Is(err, remote.ErrRefused) || errors.Is(err, receipt.ErrLogUnavailable) {
		t.Errorf("400: %v", err)
	}
	// A signer that went away.
	hs.Close()
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main")); !errors.Is(err, receipt.ErrLogUnavailable) {
		t.Errorf("closed server: %v", err)
	}
	if _, err := remote.NewClient(context.Background(), hs.URL, testToken); !errors.Is(err, receipt.ErrLogUnavailable) {
		t.Errorf("NewClient against a closed server: %v", err)
	}
}

func TestNewClientChecks(t *testing.T) {
	s := newSigner(t, 1, testToken, nil)
	for _, u := range []string{"", "127.0.0.1:80", "ftp://x", "http://", "http://u:p@h", "http://h/?q=1", "http://h/#f", "://bad"} {
		if _, err := remote.NewClient(context.Background(), u, testToken); err == nil {
			t.Errorf("base URL %q accepted", u)
		}
	}
	for _, tok := range []string{"", "has space in it"} {
		if _, err := remote.NewClient(context.Background(), s.http.URL, tok); err == nil {
			t.Errorf("token %q accepted", tok)
		}
	}
	if _, err := remote.NewClient(context.Background(), s.http.URL, testToken, remote.WithTimeout(0)); err == nil {
		t.Error("zero timeout accepted")
	}
	// Pinning: the right keyid passes, another fails before anything is signed.
	if _, err := remote.NewClient(context.Background(), s.http.URL+"/", testToken, remote.WithKeyID(s.key.KeyID())); err != nil {
		t.Errorf("pinned to the right key: %v", err)
	}
	if _, err := remote.NewClient(context.Background(), s.http.URL, testToken, remote.WithKeyID(seedKey(t, 2).KeyID())); !errors.Is(err, remote.ErrBadResponse) {
		t.Errorf("pinned to another key: %v", err)
	}
	// A /keys that is not a valid key document.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"keys":[{"keyid":"00","alg":"ed25519","publicKeyPem":"x","validFrom":"2026-01-01T00:00:00Z"}]}`)
	}))
	defer bad.Close()
	if _, err := remote.NewClient(context.Background(), bad.URL, testToken); !errors.Is(err, remote.ErrBadResponse) {
		t.Errorf("bad key document: %v", err)
	}
	// Health notices a signer that now signs with another key.
	rotated := newSigner(t, 3, testToken, nil)
	moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			s.srv.ServeHTTP(w, r)
			return
		}
		rotated.srv.ServeHTTP(w, r)
	}))
	defer moved.Close()
	c := newClient(t, moved.URL, testToken)
	if err := c.Health(context.Background()); !errors.Is(err, remote.ErrBadResponse) {
		t.Errorf("Health after rotation: %v", err)
	}
	if _, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, treeHead(t, 1, "main")); !errors.Is(err, remote.ErrBadResponse) {
		t.Errorf("sign after rotation: %v", err)
	}
}

// A signer whose clock is more than the tolerance away from the log's is refused:
// the error wraps ErrClockSkew and receipt.ErrLogUnavailable (the log answers 503),
// names the direction and the size of the skew, and signing works again once the
// clock is right.
func TestClientRefusesASkewedSigner(t *testing.T) {
	var offset atomic.Int64
	s := newSigner(t, 7, testToken, func(c *remote.ServerConfig) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	c, err := remote.NewClient(context.Background(), s.http.URL, testToken, remote.WithMaxSkew(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := receipt.Canonical(receipt.TreeHead{TreeSize: 1, RootHash: strings.Repeat("ab", 32), Timestamp: "2026-03-02T00:00:00Z", Log: "main"})
	sign := func() error {
		_, err := c.SignEnvelope(context.Background(), receipt.PayloadTreeHead, payload)
		return err
	}
	if err := sign(); err != nil {
		t.Fatalf("in step: %v", err)
	}
	for _, tc := range []struct {
		offset time.Duration
		words  string
	}{{10 * time.Minute, "ahead of this host's, more than the 30s allowed"}, {-2 * time.Minute, "behind this host's, more than the 30s allowed"}} {
		offset.Store(int64(tc.offset))
		err := sign()
		if !errors.Is(err, remote.ErrClockSkew) || !errors.Is(err, receipt.ErrLogUnavailable) || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("signer %v off: %v, want ErrClockSkew and ErrLogUnavailable saying %q", tc.offset, err, tc.words)
		}
		if err := c.Health(context.Background()); !errors.Is(err, remote.ErrClockSkew) {
			t.Errorf("health of a signer %v off: %v", tc.offset, err)
		}
	}
	offset.Store(int64(20 * time.Second)) // within the tolerance
	if err := sign(); err != nil {
		t.Errorf("20 s off, 30 s allowed: %v", err)
	}
	if _, err := remote.NewClient(context.Background(), s.http.URL, testToken, remote.WithMaxSkew(0)); err == nil {
		t.Error("a zero tolerance was accepted")
	}
}
