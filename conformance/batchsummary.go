package conformance

import (
	"time"
)

// Counts are verified and failed bundles in one group.
type Counts struct {
	Verified int `json:"verified"`
	Failed   int `json:"failed"`
}

// Summary is what a batch found, grouped the ways an auditor reads it.
type Summary struct {
	Bundles  int `json:"bundles"`
	Verified int `json:"verified"`
	Failed   int `json:"failed"`
	// ByFailedCheck counts failed bundles by their first failed check; a file that
	// could not be read counts under "unreadable file".
	ByFailedCheck map[string]int `json:"byFailedCheck"`
	// The groups below count a verified bundle under its values and every failed one
	// under NotVerified: a failed receipt's tool, agent or status are claims nothing
	// vouches for (a tampered receipt names whatever tool it likes), listed as such
	// per bundle in Failures and Receipts.
	ByIssuer    map[string]Counts `json:"byIssuer"`    // issuer kind
	ByTool      map[string]Counts `json:"byTool"`      // tool name
	ByAgent     map[string]Counts `json:"byAgent"`     // agent id
	ByStatus    map[string]Counts `json:"byStatus"`    // execution status
	ByExecution map[string]Counts `json:"byExecution"` // provenance of the execution
	// Failures lists the first failed bundles (up to the batch's KeepFailures);
	// FailuresOmitted counts the rest.
	Failures        []*BundleResult `json:"failures"`
	FailuresOmitted int             `json:"failuresOmitted,omitempty"`
	// Receipts lists the first bundles in the order verified, each with its result
	// (up to MaxListedReceipts; the HTML report's per-receipt list); ReceiptsOmitted
	// counts the rest. Not in the JSON summary, whose per-bundle lines are --json's.
	Receipts        []*BundleResult `json:"-"`
	ReceiptsOmitted int             `json:"-"`

	Seconds          float64    `json:"seconds"`
	BundlesPerSecond float64    `json:"bundlesPerSecond"`
	Workers          int        `json:"workers"`
	Cache            CacheStats `json:"cache"`

	keep int // how many failures Failures lists at most
}

// CacheStats say how much work bundles shared.
type CacheStats struct {
	Hits   int64 `json:"hits"`   // grant, head and consistency checks answered from the cache
	Misses int64 `json:"misses"` // ... and checked
}

// UnreadableFile is the ByFailedCheck group of files that could not be read.
const UnreadableFile = "unreadable file"

// NotVerified is the group key of every failed bundle in ByIssuer, ByTool, ByAgent,
// ByStatus and ByExecution.
const NotVerified = "(not verified)"

// MaxListedReceipts bounds Summary.Receipts.
const MaxListedReceipts = 10000

func newSummary(keep int) *Summary {
	return &Summary{
		ByFailedCheck: map[string]int{}, ByIssuer: map[string]Counts{}, ByTool: map[string]Counts{},
		ByAgent: map[string]Counts{}, ByStatus: map[string]Counts{}, ByExecution: map[string]Counts{},
		Failures: make([]*BundleResult, 0, min(keep, 64)), keep: keep,
	}
}

func (s *Summary) add(r *BundleResult) {
	s.Bundles++
	if len(s.Receipts) < MaxListedReceipts {
		s.Receipts = append(s.Receipts, r)
	} else {
		s.ReceiptsOmitted++
	}
	bump := func(m map[string]Counts, k string) {
		if !r.Verified {
			k = NotVerified
		} else if k == "" {
			k = "(unknown)"
		}
		c := m[k]
		if r.Verified {
			c.Verified++
		} else {
			c.Failed++
		}
		m[k] = c
	}
	if r.Verified {
		s.Verified++
	} else {
		s.Failed++
		check := r.FailedCheck
		if r.Error != "" {
			check = UnreadableFile
		}
		s.ByFailedCheck[check]++
		if len(s.Failures) < s.keep {
			s.Failures = append(s.Failures, r)
		} else {
			s.FailuresOmitted++
		}
	}
	bump(s.ByIssuer, r.Issuer)
	bump(s.ByTool, r.Tool)
	bump(s.ByAgent, r.Agent)
	bump(s.ByStatus, r.Status)
	bump(s.ByExecution, r.Execution)
}

func (s *Summary) finish(elapsed time.Duration, workers int, c *verifyCache) {
	s.Seconds = elapsed.Seconds()
	if s.Seconds > 0 {
		s.BundlesPerSecond = float64(s.Bundles) / s.Seconds
	}
	s.Workers = workers
	if c != nil {
		s.Cache = CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load()}
	}
}
