package portal

import (
	"net/http"

	"svc.dev/svc/httpjson"
)

// write refuses, before anything else, a write without Content-Type
// application/json: a browser sends a cross-site form post (or a "simple" fetch)
// only with a form or text type, so such a request never reaches a handler.
func (p *Portal) write(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if httpjson.RefuseNonJSON(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads a body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	return httpjson.ReadBody(w, r, limit)
}

// decodeJSON parses one JSON object into v, refusing unknown fields and trailing data.
func decodeJSON(body []byte, v any) error { return httpjson.DecodeJSON(body, v) }

// decode reads and parses the request body into v, answering 400 or 413 itself.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return httpjson.Decode(w, r, MaxBody, v)
}
