package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// FetchTimeout bounds every outbound fetch (keys, witness, consistency).
const FetchTimeout = 10 * time.Second

// maxFetch caps a fetched document.
const maxFetch = 8 << 20

// LogServer reads a log server's public routes under Base (the default tenant at the
// root, others under /t/<tenant>).
type LogServer struct {
	Base   string
	Client *http.Client // nil: a client with FetchTimeout
}

// NewLogServer checks base and makes a LogServer.
func NewLogServer(base string) (*LogServer, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("log URL %q: want http(s)://host[:port][/t/<tenant>]", base)
	}
	return &LogServer{Base: strings.TrimRight(base, "/")}, nil
}

// HTTPError is a fetch answered with a status other than 200.
type HTTPError struct {
	URL    string
	Status int
	Body   string // the answer, at most 300 bytes
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("GET %s: %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Body)
}

// Fetch GETs u with FetchTimeout (and header, when set) and returns the body of a 200
// answer, refusing one larger than limit bytes. Other statuses are an *HTTPError.
// Every outbound fetch of the verifier, the auditor, the witness, the probe and the
// export goes through it.
func Fetch(ctx context.Context, client *http.Client, u string, limit int64, header http.Header) ([]byte, error) {
	if client == nil {
		client = &http.Client{Timeout: FetchTimeout}
	}
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		b := strings.TrimSpace(string(body))
		if len(b) > 300 {
			b = b[:300] + "…"
		}
		return nil, &HTTPError{URL: u, Status: resp.StatusCode, Body: b}
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", u, limit)
	}
	return body, nil
}

// GetJSON fetches u into v (Fetch, capped at 8 MiB).
func GetJSON(ctx context.Context, client *http.Client, u string, v any) error {
	body, err := Fetch(ctx, client, u, maxFetch, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// Size reads the current size from the log's /head (the head's signature is not what
// this answers; callers check heads themselves).
func (s *LogServer) Size() (uint64, error) {
	var h struct {
		TreeHead *receipt.Envelope `json:"treeHead"`
	}
	if err := GetJSON(context.Background(), s.Client, s.Base+"/head", &h); err != nil {
		return 0, err
	}
	if h.TreeHead == nil {
		return 0, fmt.Errorf("GET %s/head: no treeHead", s.Base)
	}
	th, err := receipt.DecodeTreeHead(h.TreeHead)
	if err != nil {
		return 0, err
	}
	return th.TreeSize, nil
}

// RootAt asks /root?size=N.
func (s *LogServer) RootAt(size uint64) (merkle.Hash, error) {
	var r struct {
		TreeSize uint64 `json:"treeSize"`
		RootHash string `json:"rootHash"`
	}
	if err := GetJSON(context.Background(), s.Client, s.Base+"/root?size="+strconv.FormatUint(size, 10), &r); err != nil {
		return merkle.Hash{}, err
	}
	if r.TreeSize != size {
		return merkle.Hash{}, fmt.Errorf("asked the root at size %d, got size %d", size, r.TreeSize)
	}
	return merkle.ParseHash(r.RootHash)
}

// Consistency asks /consistency?old=M&new=N.
func (s *LogServer) Consistency(oldSize, newSize uint64) ([]merkle.Hash, error) {
	var r struct {
		OldSize uint64   `json:"oldSize"`
		NewSize uint64   `json:"newSize"`
		Hashes  []string `json:"hashes"`
	}
	u := fmt.Sprintf("%s/consistency?old=%d&new=%d", s.Base, oldSize, newSize)
	if err := GetJSON(context.Background(), s.Client, u, &r); err != nil {
		return nil, err
	}
	if r.OldSize != oldSize || r.NewSize != newSize {
		return nil, fmt.Errorf("asked for a proof %d → %d, got %d → %d", oldSize, newSize, r.OldSize, r.NewSize)
	}
	return receipt.ParseHashes(r.Hashes)
}

// Describe names the server.
func (s *LogServer) Describe() string { return "log server " + s.Base }

// Keys fetches the log's key document (/.well-known/svc-log.json at the server root, or
// under the tenant prefix when the base names one) and returns its checked keys.
func (s *LogServer) Keys(ctx context.Context) ([]signer.PublicKey, error) {
	var doc signer.KeyDocument
	u := s.Base + "/.well-known/svc-log.json"
	if err := GetJSON(ctx, s.Client, u, &doc); err != nil {
		return nil, err
	}
	keys, err := doc.PublicKeys()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return keys, nil
}

// WitnessKeys fetches a witness's key document (<base>/.well-known/svc-witness.json)
// and returns its checked keys.
func WitnessKeys(ctx context.Context, base string) ([]signer.PublicKey, error) {
	var doc signer.KeyDocument
	if err := GetJSON(ctx, nil, strings.TrimRight(base, "/")+"/.well-known/svc-witness.json", &doc); err != nil {
		return nil, fmt.Errorf("witness key document: %w", err)
	}
	keys, err := doc.PublicKeys()
	if err != nil {
		return nil, fmt.Errorf("witness key document: %w", err)
	}
	return keys, nil
}
