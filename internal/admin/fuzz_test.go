package admin

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecode: an admin request body is accepted only as a JSON object of the known
// fields within MaxBody; anything else is answered 400 or 413 with {"error"}, never a
// panic.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"id":"acme","logId":"log.example/acme"}`))
	f.Add([]byte(`{"id":"acme","extra":1}`))
	f.Add([]byte(`{"id":`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/admin/tenants", bytes.NewReader(body))
		var req struct {
			ID    string `json:"id"`
			LogID string `json:"logId"`
		}
		if decode(w, r, &req) {
			if len(body) > MaxBody {
				t.Fatalf("accepted a body of %d bytes", len(body))
			}
			return
		}
		if w.Code != http.StatusBadRequest && w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("refusal with status %d", w.Code)
		}
		if !bytes.HasPrefix(w.Body.Bytes(), []byte(`{"error":`)) {
			t.Fatalf("refusal body %q", w.Body.String())
		}
	})
}
