package witness

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// The C2SP tlog-witness protocol (https://c2sp.org/tlog-witness), beside the SPEC
// cycle: POST /add-checkpoint takes an old size line, up to 63 consistency proof lines,
// a blank line and a signed checkpoint note of a log this witness is configured with,
// and answers a tlog-cosignature/v1 line once the checkpoint is proved to extend the
// last one it cosigned for that origin. So the witness cosigns any C2SP log (Tessera's,
// Sunlight's, svc's own C2SP checkpoints), not only svc's SPEC checkpoints.
//
// Answers, as the protocol says: 404 for an origin it does not witness, 403 when no
// signature by the log's key verifies, 400 for a malformed body or an old size above
// the checkpoint's, 409 (Content-Type text/x.tlog.size, the size it holds) when the old
// size is not the one it last cosigned, or a second root at that size, 422 when the
// consistency proof does not verify, 413 beyond MaxAddCheckpointBody. The state (one
// file an origin under <dir>) is checked and saved under one lock and fsynced before
// the cosignature is answered. A second root at the cosigned size or a proof that does
// not verify for a validly signed checkpoint is evidence: the request is kept in
// <dir>/ALARM-<time>.txt. No credential is asked: the log's signature is the
// authentication (C2SP), and a request costs one signature check before any state.

// MaxAddCheckpointBody caps a POST /add-checkpoint body.
const MaxAddCheckpointBody = 64 << 10

// maxProofLines is the protocol's cap on consistency proof lines.
const maxProofLines = 63

// TlogConfig configures a TlogWitness.
type TlogConfig struct {
	Key *signer.Key // the witness key; required
	// Name is the cosigner name, a schema-less URL such as witness.example.com/w1.
	Name string
	// Logs are the note verifier keys (vkeys) of the logs witnessed; each key's name
	// is its log's origin.
	Logs   []string
	Dir    string // state and alarms; required
	Logger *slog.Logger
	Now    func() time.Time
}

// TlogWitness serves POST /add-checkpoint.
type TlogWitness struct {
	cos  *Cosigner
	logs map[string][]note.Verifier // by origin
	dir  string
	log  *slog.Logger
	mu   sync.Mutex // check-and-save of every origin's state
}

// tlogState is the last checkpoint cosigned for an origin.
type tlogState struct {
	Origin   string `json:"origin"`
	Size     uint64 `json:"size"`
	RootHash string `json:"rootHash"` // hex
}

// NewTlogWitness checks cfg and builds the handler.
func NewTlogWitness(cfg TlogConfig) (*TlogWitness, error) {
	if cfg.Key == nil || cfg.Dir == "" {
		return nil, errors.New("tlog witness: a key and a state directory are required")
	}
	cos, err := NewCosigner(cfg.Name, cfg.Key, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("tlog witness: %w", err)
	}
	w := &TlogWitness{cos: cos, logs: map[string][]note.Verifier{}, dir: cfg.Dir, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	for _, vkey := range cfg.Logs {
		v, err := note.NewVerifier(vkey)
		if err != nil {
			return nil, fmt.Errorf("tlog witness: log key %q: %w", vkey, err)
		}
		w.logs[v.Name()] = append(w.logs[v.Name()], v)
	}
	if len(w.logs) == 0 {
		return nil, errors.New("tlog witness: no log keys: name each log witnessed by its note verifier key")
	}
	return w, os.MkdirAll(cfg.Dir, 0o755)
}

// VerifierKey is the witness's cosigner vkey, what logs and clients are given.
func (w *TlogWitness) VerifierKey() string { return w.cos.VerifierKey() }

// ServeHTTP answers POST /add-checkpoint.
func (w *TlogWitness) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/add-checkpoint" {
		http.Error(rw, "no such route: this witness serves POST /add-checkpoint", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		http.Error(rw, "method "+r.Method+" not allowed; use POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxAddCheckpointBody))
	if _, over := errors.AsType[*http.MaxBytesError](err); over {
		http.Error(rw, "request body over "+strconv.Itoa(MaxAddCheckpointBody)+" bytes", http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(rw, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	code, answer, ctype := w.addCheckpoint(body)
	rw.Header().Set("Content-Type", ctype)
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(code)
	_, _ = io.WriteString(rw, answer)
	level := slog.LevelInfo
	if code != http.StatusOK {
		level = slog.LevelWarn
	}
	w.log.Log(r.Context(), level, "add-checkpoint", "status", code, "answer", strings.TrimSpace(firstLine(answer)), "remote", r.RemoteAddr)
}

// addRequest is a parsed add-checkpoint body.
type addRequest struct {
	old    uint64
	proof  []merkle.Hash
	signed []byte // the checkpoint note
}

// parseAddRequest parses an add-checkpoint body; the error names what was wrong.
func parseAddRequest(body []byte) (*addRequest, error) {
	rd := bufio.NewReader(bytes.NewReader(body))
	line, err := rd.ReadString('\n')
	oldText, ok := strings.CutPrefix(line, "old ")
	if err != nil || !ok {
		return nil, errors.New(`the body must start with "old <size>\n"`)
	}
	oldText = strings.TrimSuffix(oldText, "\n")
	old, err := strconv.ParseUint(oldText, 10, 64)
	if err != nil || strconv.FormatUint(old, 10) != oldText {
		return nil, fmt.Errorf("old size %q is not a decimal number without leading zeros", oldText)
	}
	req := &addRequest{old: old}
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return nil, errors.New("the proof lines must end with an empty line before the checkpoint")
		}
		if line == "\n" {
			break
		}
		h, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(line, "\n"))
		if err != nil || len(h) != len(merkle.Hash{}) {
			return nil, fmt.Errorf("consistency proof line %d is not the base64 of a 32-byte hash", len(req.proof)+1)
		}
		if len(req.proof) == maxProofLines {
			return nil, fmt.Errorf("more than %d consistency proof lines", maxProofLines)
		}
		req.proof = append(req.proof, merkle.Hash(h))
	}
	req.signed, _ = io.ReadAll(rd)
	if old == 0 && len(req.proof) > 0 {
		return nil, errors.New("the consistency proof must be empty when the old size is 0")
	}
	return req, nil
}

// addCheckpoint decides an add-checkpoint request: status, body and content type.
func (w *TlogWitness) addCheckpoint(body []byte) (int, string, string) {
	const text = "text/plain; charset=utf-8"
	req, err := parseAddRequest(body)
	if err != nil {
		return http.StatusBadRequest, err.Error() + "\n", text
	}
	origin, _, _ := strings.Cut(string(req.signed), "\n")
	verifiers, ok := w.logs[origin]
	if !ok {
		return http.StatusNotFound, fmt.Sprintf("unknown log origin %q: this witness does not witness it\n", origin), text
	}
	n, err := note.Open(req.signed, note.VerifierList(verifiers...))
	if err != nil {
		return http.StatusForbidden, "no signature by the log's key verifies: " + err.Error() + "\n", text
	}
	size, root, err := ParseCheckpointBody(n.Text)
	if err != nil {
		return http.StatusBadRequest, "the checkpoint: " + err.Error() + "\n", text
	}
	if req.old > size {
		return http.StatusBadRequest, fmt.Sprintf("old size %d is above the checkpoint's size %d\n", req.old, size), text
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.loadState(origin)
	if err != nil {
		return http.StatusInternalServerError, "witness state: " + err.Error() + "\n", text
	}
	if req.old != st.Size {
		return http.StatusConflict, strconv.FormatUint(st.Size, 10) + "\n", "text/x.tlog.size"
	}
	if code, msg := w.extends(st, req, size, root, body); code != 0 {
		return code, msg, text
	}
	if err := w.saveState(tlogState{Origin: origin, Size: size, RootHash: hex.EncodeToString(root[:])}); err != nil {
		return http.StatusInternalServerError, "witness state not saved, nothing cosigned: " + err.Error() + "\n", text
	}
	cosigned, err := note.Sign(&note.Note{Text: n.Text}, w.cos)
	if err == nil {
		var lines []byte
		if lines, err = signatureLines(cosigned, n.Text); err == nil {
			return http.StatusOK, string(lines), text
		}
	}
	return http.StatusInternalServerError, "cosigning failed: " + err.Error() + "\n", text
}

// extends checks the checkpoint (size, root) against the cosigned state st with the
// request's proof: 0 when it may be cosigned, else the status and why. Evidence of a
// second history is kept.
func (w *TlogWitness) extends(st tlogState, req *addRequest, size uint64, root merkle.Hash, body []byte) (int, string) {
	if st.Size == 0 {
		return 0, "" // the first checkpoint of the origin: trusted on first use
	}
	held, err := merkle.ParseHash(st.RootHash)
	if err != nil {
		return http.StatusInternalServerError, "witness state: " + err.Error() + "\n"
	}
	if size == st.Size {
		if root != held {
			w.evidence(st.Origin, "second-history", body)
			return http.StatusConflict, fmt.Sprintf("a second root at size %d, which this witness cosigned with another root\n", size)
		}
		return 0, ""
	}
	if err := merkle.VerifyConsistency(st.Size, size, held, root, req.proof); err != nil {
		w.evidence(st.Origin, "does-not-extend", body)
		return http.StatusUnprocessableEntity, fmt.Sprintf("the consistency proof from size %d to %d does not verify: %v\n", st.Size, size, err)
	}
	return 0, ""
}

// evidence keeps a validly signed request that shows a second history.
func (w *TlogWitness) evidence(origin, kind string, body []byte) {
	data := fmt.Appendf(nil, "%s of %s\n\n%s", kind, origin, body)
	path, err := writeUnique(w.dir, "ALARM-"+time.Now().UTC().Format(alarmStamp), ".txt", data)
	w.log.Error("C2SP log misbehaved: evidence kept", "origin", origin, "kind", kind, "file", path, "err", err)
}

// ParseCheckpointBody reads a C2SP checkpoint body's size and root (extension lines
// may follow).
func ParseCheckpointBody(text string) (uint64, merkle.Hash, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 {
		return 0, merkle.Hash{}, errors.New("not origin, size and root lines")
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return 0, merkle.Hash{}, fmt.Errorf("size %q is not a decimal number", lines[1])
	}
	h, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(h) != len(merkle.Hash{}) {
		return 0, merkle.Hash{}, fmt.Errorf("root %q is not the base64 of a 32-byte hash", lines[2])
	}
	return size, merkle.Hash(h), nil
}

func (w *TlogWitness) statePath(origin string) string {
	sum := sha256.Sum256([]byte(origin))
	return filepath.Join(w.dir, hex.EncodeToString(sum[:16])+".json")
}

func (w *TlogWitness) loadState(origin string) (tlogState, error) {
	data, err := receipt.ReadFileCapped(w.statePath(origin), 1<<16)
	if errors.Is(err, os.ErrNotExist) {
		return tlogState{Origin: origin}, nil
	}
	if err != nil {
		return tlogState{}, err
	}
	var st tlogState
	if err := json.Unmarshal(data, &st); err != nil || st.Origin != origin {
		return tlogState{}, fmt.Errorf("state file %s is corrupt or of another origin; fix or remove it by hand", w.statePath(origin))
	}
	return st, nil
}

func (w *TlogWitness) saveState(st tlogState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return receipt.WriteFileAtomic(w.statePath(st.Origin), data, 0o644)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
