package consume

import "time"

// Status is what `svc exports status` shows of one handler: an exporter of one
// tenant (package exporters), or a database projection over every tenant (Tenant "*",
// package internal/store).
type Status struct {
	Exporter    string    `json:"exporter"`    // the handler name
	Tenant      string    `json:"tenant"`      // the tenant, "*" for all
	Position    uint64    `json:"position"`    // stream sequence up to which everything is delivered (or dead)
	Backlog     uint64    `json:"backlog"`     // messages not yet delivered
	LastError   string    `json:"lastError"`   // the last failure recorded, if any
	LastErrorAt time.Time `json:"lastErrorAt"` // when
	DeadLetters uint64    `json:"deadLetters"` // messages kept in SVC_DEAD
}
