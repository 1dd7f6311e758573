package portal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"svc.dev/svc/internal/logserver"
)

// write refuses, before anything else, a write without Content-Type
// application/json: a browser sends a cross-site form post (or a "simple" fetch)
// only with a form or text type, so such a request never reaches a handler.
func (p *Portal) write(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			logserver.WriteError(w, http.StatusUnsupportedMediaType, "this route takes Content-Type: application/json")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads a body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			logserver.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", limit))
			return nil, false
		}
		logserver.WriteError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return nil, false
	}
	return body, true
}

// decodeJSON parses one JSON object into v, refusing unknown fields and trailing data.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if dec.More() {
		return errors.New("body: data after the JSON object")
	}
	return nil
}

// decode reads and parses the request body into v, answering 400 or 413 itself.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := readBody(w, r, MaxBody)
	if !ok {
		return false
	}
	if err := decodeJSON(body, v); err != nil {
		logserver.WriteError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}
