package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Check is one line of a report.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Field is one row of the report's table of fields with their provenance.
type Field struct {
	Field      string `json:"field"`
	Value      string `json:"value"`
	Provenance string `json:"provenance"`
}

// Report is the result of verifying one bundle.
type Report struct {
	Verified  bool     `json:"verified"`
	Result    string   `json:"result"` // "VERIFIED" or "FAILED"
	ReceiptID string   `json:"receiptId,omitempty"`
	Issuer    *Issuer  `json:"issuer,omitempty"`
	Checks    []Check  `json:"checks"`
	Fields    []Field  `json:"fields,omitempty"`
	Notes     []string `json:"notes,omitempty"`

	// brief is set for a bundle of a batch, which keeps only what a BundleResult
	// holds: no table of fields, no issuer summary, and no detail of a check that
	// passed (a fifth of a batch's time besides the signatures went to them).
	brief bool
}

// Issuer summarises who issued the receipt and what that means.
type Issuer struct {
	Kind     string `json:"kind"`
	KeyID    string `json:"keyid"`
	Enforced bool   `json:"enforced"` // a gateway enforces outside the agent's process
	Summary  string `json:"summary"`
}

// FirstFailure is the name of the first failed check, or "" when none failed.
func (r *Report) FirstFailure() string {
	for _, c := range r.Checks {
		if !c.OK {
			return c.Name
		}
	}
	return ""
}

// CheckNames lists the names of the checks that ran, in order.
func (r *Report) CheckNames() []string {
	out := make([]string, len(r.Checks))
	for i, c := range r.Checks {
		out[i] = c.Name
	}
	return out
}

func (r *Report) add(name string, ok bool, format string, a ...any) bool {
	if r.Checks == nil {
		r.Checks = make([]Check, 0, checksPerBundle)
	}
	c := Check{Name: name, OK: ok}
	if !ok || !r.brief {
		c.Detail = fmt.Sprintf(format, a...)
	}
	r.Checks = append(r.Checks, c)
	return ok
}

// checksPerBundle is about how many checks a gateway receipt runs: the capacity a
// report starts with, so that a batch does not grow each report several times.
const checksPerBundle = 24

func (r *Report) finish() {
	r.Verified = len(r.Checks) > 0 && r.FirstFailure() == ""
	r.Result = "FAILED"
	if r.Verified {
		r.Result = "VERIFIED"
	}
}

// WriteText prints the report as SPEC.md describes: PASS/FAIL lines, the RESULT line,
// the ISSUER line, then the table of fields with provenance.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, c := range r.Checks {
		word := "PASS"
		if !c.OK {
			word = "FAIL"
		}
		if c.Detail != "" {
			fmt.Fprintf(&b, "%s %s: %s\n", word, c.Name, c.Detail)
		} else {
			fmt.Fprintf(&b, "%s %s\n", word, c.Name)
		}
	}
	if r.Verified {
		b.WriteString("RESULT: VERIFIED\n")
	} else {
		fmt.Fprintf(&b, "RESULT: FAILED (first failed check: %s)\n", r.FirstFailure())
	}
	if r.Issuer != nil {
		fmt.Fprintf(&b, "ISSUER: %s\n", r.Issuer.Summary)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(r.Fields) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nFIELD\tVALUE\tPROVENANCE")
		for _, f := range r.Fields {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Field, f.Value, f.Provenance)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		if _, err := fmt.Fprintf(w, "NOTE: %s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON prints the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
