package admin

import "net/http"

func (h *Handler) page(w http.ResponseWriter, r *http.Request, actor string) {
	writeError(w, http.StatusNotImplemented, "the operator page is not built yet")
}

func (h *Handler) pageAction(w http.ResponseWriter, r *http.Request, actor string) {
	writeError(w, http.StatusNotImplemented, "the operator page is not built yet")
}
