package logserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"svc.dev/svc/httpjson"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/pipeline"
)

// MaxAddBody caps the body of POST /add: the entry itself, at most what a C2SP entry
// bundle's uint16 length can carry.
const MaxAddBody = 0xffff

// add is POST /add (and /t/<tenant>/add): the write route of Tessera's personalities,
// so that Tessera's hammer and other clients of /add drive this log unchanged. The
// body is the entry itself (1..65,535 bytes of UTF-8: a log file line holds it as a
// JSON string); authentication, the per-token rate limit and the errors are those of
// /append. A 200 answers, as text/plain, the decimal leaf index on the first line (all
// Tessera's clients read) and the same proof /append answers ({inclusion, treeHead})
// as JSON on the second, so the answer still carries an inclusion proof under a
// signed head. A leaf already in the log gets its existing index.
func (s *Server) add(w http.ResponseWriter, r *http.Request, t *Tenant) {
	token, body, ok := s.writeBody(w, r, t, MaxAddBody, "entry")
	if !ok {
		return
	}
	switch {
	case len(body) == 0:
		s.cfg.Telemetry.Refused(telemetry.ReasonInvalid)
		httpjson.WriteError(w, http.StatusBadRequest, "empty entry: POST /add takes the entry itself as the body")
		return
	case !utf8.Valid(body):
		s.cfg.Telemetry.Refused(telemetry.ReasonInvalid)
		httpjson.WriteError(w, http.StatusBadRequest, "entry is not valid UTF-8 (the log file holds each entry as a JSON string)")
		return
	}
	if !s.allow(w, token) {
		return
	}
	proof, ok := s.commit(w, r, t, pipeline.NewLeaf(body), "add")
	if !ok {
		return
	}
	index, err := proofLeafIndex(proof)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	var line [21]byte // the index and its newline
	head := append(strconv.AppendUint(line[:0], index, 10), '\n')
	// Written in pieces into the response's buffer with the length set, so that the
	// answer is neither copied once more nor sent chunked once it passes 2 KB.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(proof)+1))
	_, _ = w.Write(head)
	_, _ = w.Write(proof)
	_, _ = w.Write(newline)
}

var newline = []byte{'\n'}

// proofLeafIndex reads inclusion.leafIndex from the sequencer's answer, which begins
// {"inclusion":{"leafIndex":N, when the sequencer wrote it; anything else is decoded.
func proofLeafIndex(proof []byte) (uint64, error) {
	if rest, ok := bytes.CutPrefix(proof, []byte(`{"inclusion":{"leafIndex":`)); ok {
		if end := bytes.IndexByte(rest, ','); end > 0 {
			if n, err := strconv.ParseUint(string(rest[:end]), 10, 64); err == nil {
				return n, nil
			}
		}
	}
	var p struct {
		Inclusion *struct {
			LeafIndex *uint64 `json:"leafIndex"`
		} `json:"inclusion"`
	}
	if err := json.Unmarshal(proof, &p); err != nil || p.Inclusion == nil || p.Inclusion.LeafIndex == nil {
		return 0, fmt.Errorf("the sequencer's answer names no leaf index: %w", errors.Join(err, errors.New("no inclusion.leafIndex")))
	}
	return *p.Inclusion.LeafIndex, nil
}
