// Package httpjson is how every JSON server of svc answers and reads: the log's HTTP
// front (internal/logserver), the admin API (internal/admin) and the portal. It
// writes an answer as JSON, uncached ([WriteJSON]), and an error as SPEC.md's error
// body {"error": "..."} ([WriteError], the client package's ErrorBody); it reads a
// body capped in size and decodes it strictly ([Decode]), and refuses a write that is
// not application/json with 415 ([RefuseNonJSON]).
package httpjson
