package conformance

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteText prints the summary for a person: totals, failures by first failing check,
// then verified and failed counts by issuer kind, tool, execution status and
// provenance of the execution, and the RESULT line.
func (s *Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "BATCH: %d bundles, %d verified, %d failed (%.1f s, %.0f bundles/s, %d workers; %d shared checks answered from the cache, %d run)\n",
		s.Bundles, s.Verified, s.Failed, s.Seconds, s.BundlesPerSecond, s.Workers, s.Cache.Hits, s.Cache.Misses)
	if len(s.ByFailedCheck) > 0 {
		fmt.Fprintln(tw, "\nFIRST FAILING CHECK\tBUNDLES")
		for _, k := range sortedByCount(s.ByFailedCheck) {
			fmt.Fprintf(tw, "%s\t%d\n", k, s.ByFailedCheck[k])
		}
	}
	for _, g := range s.groups() {
		fmt.Fprintf(tw, "\n%s\tVERIFIED\tFAILED\n", strings.ToUpper(g.title))
		for _, k := range slices.Sorted(maps.Keys(g.m)) {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", k, g.m[k].Verified, g.m[k].Failed)
		}
	}
	if s.Failed == 0 && s.Bundles > 0 {
		fmt.Fprintf(tw, "\nRESULT: VERIFIED (all %d bundles)\n", s.Bundles)
	} else {
		fmt.Fprintf(tw, "\nRESULT: FAILED (%d of %d bundles)\n", s.Failed, s.Bundles)
	}
	return tw.Flush()
}

type summaryGroup struct {
	title string
	m     map[string]Counts
}

// groups are the summary's breakdowns, in the order reports print them.
func (s *Summary) groups() []summaryGroup {
	return []summaryGroup{
		{"by issuer kind", s.ByIssuer}, {"by tool", s.ByTool}, {"by execution status", s.ByStatus},
		{"by provenance of the execution", s.ByExecution}, {"by agent", s.ByAgent},
	}
}

func sortedByCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	return keys
}

// WriteJSONLine prints the summary as one JSON line {"summary": ...}, the last line of
// `svc verify --json` over many bundles.
func (s *Summary) WriteJSONLine(w io.Writer) error {
	return json.NewEncoder(w).Encode(struct {
		Summary *Summary `json:"summary"`
	}{s})
}
