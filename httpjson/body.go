package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"svc.dev/svc/client"
)

// WriteJSON answers v as JSON with status, uncached: the log server's, the admin API's
// and the portal's answers.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // error texts say "<=" plainly
	_ = enc.Encode(v)
}

// WriteError answers {"error": msg} with status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, client.ErrorBody{Error: msg})
}

// IsJSON reports whether r says Content-Type application/json. A browser sends a
// cross-site form post or "simple" fetch only with a form or text type, so a write
// that requires JSON cannot be made from another site's page.
func IsJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// RefuseNonJSON answers 415 (DESIGN.md: a non-JSON write is 415) and reports true
// when r is not JSON.
func RefuseNonJSON(w http.ResponseWriter, r *http.Request) bool {
	if IsJSON(r) {
		return false
	}
	WriteError(w, http.StatusUnsupportedMediaType, "this route takes Content-Type: application/json")
	return true
}

// ReadBody reads a body of at most limit bytes, answering 413 or 400 itself.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", limit))
			return nil, false
		}
		WriteError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return nil, false
	}
	return body, true
}

// DecodeJSON parses one JSON value into v, refusing unknown fields and any data
// after the value.
func DecodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("body: data after the JSON value")
	}
	return nil
}

// Decode reads a body of at most limit bytes and parses it into v, answering 413 or
// 400 itself.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	body, ok := ReadBody(w, r, limit)
	if !ok {
		return false
	}
	if err := DecodeJSON(body, v); err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}
