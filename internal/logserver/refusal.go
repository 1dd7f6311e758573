package logserver

import (
	"errors"
	"net/http"

	"svc.dev/svc/pipeline"
)

// refusalStatus is the one place a refusal of an append becomes an HTTP status
// (SPEC.md, "Errors / Log server"). A disabled tenant is 403: its token is valid, the
// tenant may not append (SPEC.md leaves the status open; docs/design/log-service.md
// records the choice).
func refusalStatus(err error) int {
	switch {
	case errors.Is(err, pipeline.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, pipeline.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, pipeline.ErrQuota), errors.Is(err, pipeline.ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, pipeline.ErrDisabled):
		return http.StatusForbidden
	default:
		return http.StatusServiceUnavailable
	}
}
