package logservice

import "time"

// defaultMaxActive is Hosted.MaxActive's default: as many active tenants as the
// process's file descriptors and a budget of lease renewals allow, and at least
// DefaultMaxActive. An active tenant holds its tree store's level files open (one a
// level: 8 up to 256 leaves, 21 at a million; fdsPerActive is the budget, with a
// quarter of the limit left to connections and the broker's files) and renews its
// lease every LeaseTTL/3 (renewalBudget a second in all: 1,666 tenants at the default
// 5 s). A fixed 250 made a restart of 1,000 tenants stop tenants while it started
// others: every stop a last checkpoint, a lane update and a lease deletion
// (docs/measurements/2026-12-08-tenants-restart.md).
func defaultMaxActive(leaseTTL time.Duration) int {
	byFDs := DefaultMaxActive
	if n := fileLimit(); n > 0 {
		byFDs = n * 3 / 4 / fdsPerActive
	}
	byRenewals := int(renewalBudget * (leaseTTL / 3).Seconds())
	return max(DefaultMaxActive, min(byFDs, byRenewals))
}

// fdsPerActive is the file descriptors defaultMaxActive counts per active tenant.
const fdsPerActive = 8

// renewalBudget is the lease renewals a second defaultMaxActive allows: each is one
// update of the lease bucket (in memory), about as costly as an append's round trip.
const renewalBudget = 1000
