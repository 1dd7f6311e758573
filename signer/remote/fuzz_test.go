package remote_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

// FuzzSignRequest feeds arbitrary bodies to POST /sign. It never panics, answers only
// 200, 400, 409 or 413, and whatever it signs is either a tree head in canonical form,
// exactly the bytes sent, signed by the log key, or a C2SP checkpoint: an Envelope
// whose payload is the note of exactly the text sent (checkNoteAnswer). Run with
// go test ./signer/remote -run '^$' -fuzz '^FuzzSignRequest$' -fuzztime 10s.
func FuzzSignRequest(f *testing.F) {
	good := treeHead(f, 3, "main")
	f.Add([]byte(signBody(receipt.PayloadTreeHead, good)))
	f.Add([]byte(signBody(receipt.PayloadTreeHead, treeHead(f, 0, ""))))
	f.Add([]byte(signBody(receipt.PayloadInToto, good)))
	f.Add([]byte(signBody(receipt.PayloadTreeHead, []byte(`{"treeSize":1}`))))
	f.Add([]byte(`{"payloadType":"application/vnd.svc.treehead+json","payload":"e30="}`))
	f.Add([]byte(`{"payloadType":"application/vnd.svc.treehead+json","payload":null}`))
	f.Add([]byte(`{"payloadType":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Add([]byte(`{"payloadType":"x","payload":"aGk="}{}`))
	root := base64.StdEncoding.EncodeToString(make([]byte, 32))
	f.Add([]byte(signBody(remote.PayloadCheckpointNote, []byte("example.com/log\n3\n"+root+"\n"))))
	f.Add([]byte(signBody(remote.PayloadCheckpointNote, []byte("example.com/a log\n3\n"+root+"\n"))))
	f.Add([]byte(signBody(remote.PayloadCheckpointNote, []byte("a+b\n3\n"+root+"\n"))))

	key := seedKey(f, 1)
	srv, err := remote.NewServer(remote.ServerConfig{Key: key, Token: testToken, ValidFrom: validFrom, Logger: discardLogger(), Heads: openHeads(f, f.TempDir())})
	if err != nil {
		f.Fatal(err)
	}
	trusted := []signer.PublicKey{key.Public()}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, th, perr := remote.ParseSignRequest(body)
		if perr == nil && (req == nil || th == nil) {
			t.Fatal("ParseSignRequest: nil result without an error")
		}

		r := httptest.NewRequest(http.MethodPost, "/sign", bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+testToken)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		switch w.Code {
		case 200:
			if perr != nil {
				t.Fatalf("signed a body the parser refuses (%v)", perr)
			}
			env, err := receipt.ParseEnvelope(w.Body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := env.Verify(trusted); err != nil {
				t.Fatal(err)
			}
			if env.PayloadType == remote.PayloadCheckpointNote {
				checkNoteAnswer(t, key, string(req.Payload), w.Body.Bytes())
				return
			}
			if env.PayloadType != receipt.PayloadTreeHead || !bytes.Equal(env.Payload, req.Payload) {
				t.Fatalf("signed %q %q", env.PayloadType, env.Payload)
			}
			head, err := receipt.DecodeTreeHead(env)
			if err != nil {
				t.Fatalf("signed a payload that is not a tree head: %v", err)
			}
			if c, _ := receipt.Canonical(head); !bytes.Equal(c, env.Payload) {
				t.Fatalf("signed a non-canonical head %q", env.Payload)
			}
		case 400, 413:
			if perr == nil && w.Code == 400 {
				t.Fatalf("refused a body the parser accepts: %s", w.Body.String())
			}
			var e struct{ Error string }
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || strings.TrimSpace(e.Error) == "" {
				t.Fatalf("error body %q", w.Body.String())
			}
		case 409: // the signer's append-only rule: a head that does not extend what it signed for that log before
			var e struct {
				Error string
				Last  *receipt.TreeHead `json:"last"`
			}
			if perr != nil || json.Unmarshal(w.Body.Bytes(), &e) != nil || strings.TrimSpace(e.Error) == "" || e.Last == nil {
				t.Fatalf("409 for a body the parser refuses (%v), or without the last head: %s", perr, w.Body.String())
			}
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	})
}

// checkNoteAnswer: a 200 to a checkpoint text is the Envelope whose payload is the
// one signed note of that text under its origin, both signatures by key.
func checkNoteAnswer(t *testing.T, key *signer.Key, text string, body []byte) {
	t.Helper()
	origin, _, _ := strings.Cut(text, "\n")
	ns, err := signer.NewNoteSigner(origin, key)
	if err != nil {
		t.Fatalf("signed a checkpoint whose origin %q is no note key name: %v", origin, err)
	}
	v, _ := note.NewVerifier(ns.VerifierKey())
	got, err := remote.OpenCheckpointAnswer(body, key.Public(), text, v)
	if err != nil {
		t.Fatalf("the answer to a checkpoint does not open: %v\n%s", err, body)
	}
	if want, _ := note.Sign(&note.Note{Text: text}, ns); !bytes.Equal(got, want) {
		t.Fatalf("signed note %q, want %q", got, want)
	}
}

// FuzzOpenCheckpointAnswer feeds arbitrary answers to the log's check of the signer's
// answer to a checkpoint text. It never panics, and what it accepts is exactly the
// one signed note of that text by the log key (Ed25519 signatures are deterministic),
// so no answer other than the signer's gets published. Run with
// go test ./signer/remote -run '^$' -fuzz '^FuzzOpenCheckpointAnswer$' -fuzztime 10s.
func FuzzOpenCheckpointAnswer(f *testing.F) {
	key := seedKey(f, 1)
	root := base64.StdEncoding.EncodeToString(make([]byte, 32))
	text := "example.com/log\n3\n" + root + "\n"
	ns, err := signer.NewNoteSigner("example.com/log", key)
	if err != nil {
		f.Fatal(err)
	}
	v, _ := note.NewVerifier(ns.VerifierKey())
	want, _ := note.Sign(&note.Note{Text: text}, ns)
	good, _ := json.Marshal(receipt.Sign(remote.PayloadCheckpointNote, want, key))
	f.Add(good)
	f.Add([]byte(strings.Replace(string(good), remote.PayloadCheckpointNote, receipt.PayloadTreeHead, 1)))
	other, _ := note.Sign(&note.Note{Text: text}, ns, ns)
	two, _ := json.Marshal(receipt.Sign(remote.PayloadCheckpointNote, other, key))
	f.Add(two)
	raw, _ := json.Marshal(receipt.Sign(remote.PayloadCheckpointNote, []byte(text), key))
	f.Add(raw)
	f.Add([]byte(`{"signature":"AAAA"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := remote.OpenCheckpointAnswer(body, key.Public(), text, v)
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("accepted %q, want only %q", got, want)
		}
	})
}
