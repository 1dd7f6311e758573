package httplimits

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// closeUnread marks every response to a request with a body "Connection: close"
// until the handler has read that body to its end: a handler that answers first (a
// 401 before the credentials' body, a 413) is answered at once and the connection
// closed, instead of the server waiting up to the read timeout for a body a stranger
// announced and never sends (past the handler, the connection's read deadline is
// set to now, so the server's own drain of up to 256 KiB gives up at once). A
// handler that reads the body first keeps the connection alive as before.
func closeUnread(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		b := &untilEOF{ReadCloser: r.Body, done: func() { w.Header().Del("Connection") }}
		r.Body = b
		h.ServeHTTP(w, r)
		if !b.seen {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
	})
}

// untilEOF calls done once the body has been read to its end.
type untilEOF struct {
	io.ReadCloser
	done func()
	seen bool
}

func (b *untilEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.seen {
		b.seen = true
		b.done()
	}
	return n, err
}
