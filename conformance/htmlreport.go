package conformance

import (
	"html/template"
	"io"
	"maps"
	"slices"
	"time"
)

// HTMLInfo is what an HTML report says about how the batch was run.
type HTMLInfo struct {
	Generated  time.Time
	Inputs     []string // the bundle paths or directories given
	Keys       []string // what was trusted, one line each ("issuer key <keyid>" ...)
	Checkpoint string   // the checkpoint the batch was tied to, if any
}

// WriteHTML writes the summary as one self-contained HTML page (no scripts, no
// outside resources; it reads offline): the totals and RESULT, the failures by first
// failing check, a table of failed bundles with their check and detail, counts per
// agent, tool, issuer kind, execution status and provenance (failed bundles under
// NotVerified: their values are unvouched claims), and a row per receipt.
func (s *Summary) WriteHTML(w io.Writer, info HTMLInfo) error {
	type row struct {
		Key string
		Counts
	}
	type group struct {
		Title string
		Rows  []row
	}
	var groups []group
	for _, g := range s.groups() {
		gr := group{Title: g.title}
		for _, k := range slices.Sorted(maps.Keys(g.m)) {
			gr.Rows = append(gr.Rows, row{k, g.m[k]})
		}
		groups = append(groups, gr)
	}
	type checkRow struct {
		Check string
		N     int
	}
	var checks []checkRow
	for _, k := range sortedByCount(s.ByFailedCheck) {
		checks = append(checks, checkRow{k, s.ByFailedCheck[k]})
	}
	return htmlReport.Execute(w, map[string]any{
		"S": s, "Info": info, "Groups": groups, "Checks": checks, "Generated": info.Generated.UTC().Format(time.RFC3339),
	})
}

var htmlReport = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Receipt audit: {{if .S.Failed}}{{.S.Failed}} of {{.S.Bundles}} failed{{else}}{{.S.Bundles}} verified{{end}}</title>
<style>
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1b1f24}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem} th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa} td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:600} .bad{color:#cf222e;font-weight:600}
.result{font-size:1.2rem;padding:.6rem 1rem;border-radius:6px;display:inline-block;margin:.6rem 0}
.result.ok{background:#dafbe1} .result.bad{background:#ffebe9}
code,.path{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.82rem;word-break:break-all}
.groups{display:flex;flex-wrap:wrap;gap:1.5rem} .muted{color:#57606a}
</style></head><body>
<h1>Receipt audit</h1>
<p class="muted">Generated {{.Generated}} by svc verify. {{range .Info.Inputs}}<code>{{.}}</code> {{end}}</p>
{{if .S.Failed}}<div class="result bad">RESULT: FAILED: {{.S.Failed}} of {{.S.Bundles}} bundles failed</div>
{{else}}<div class="result ok">RESULT: VERIFIED: all {{.S.Bundles}} bundles</div>{{end}}
<table><tr><th>bundles</th><th>verified</th><th>failed</th><th>seconds</th><th>bundles/s</th><th>workers</th></tr>
<tr><td class="n">{{.S.Bundles}}</td><td class="n ok">{{.S.Verified}}</td><td class="n{{if .S.Failed}} bad{{end}}">{{.S.Failed}}</td>
<td class="n">{{printf "%.1f" .S.Seconds}}</td><td class="n">{{printf "%.0f" .S.BundlesPerSecond}}</td><td class="n">{{.S.Workers}}</td></tr></table>
{{if .Info.Checkpoint}}<p>Every receipt's tree head was checked against the checkpoint <code>{{.Info.Checkpoint}}</code>.</p>{{end}}
{{if .Info.Keys}}<p class="muted">Trusted: {{range .Info.Keys}}<br><code>{{.}}</code>{{end}}</p>{{end}}
{{if .Checks}}<h2>Failures by first failing check</h2>
<table><tr><th>check</th><th>bundles</th></tr>{{range .Checks}}<tr><td>{{.Check}}</td><td class="n">{{.N}}</td></tr>{{end}}</table>
<h2>Failed bundles</h2>
<table><tr><th>bundle</th><th>receipt id</th><th>issuer</th><th>agent</th><th>tool</th><th>first failing check</th><th>detail</th></tr>
{{range .S.Failures}}<tr><td class="path">{{.Path}}</td><td class="path">{{.ReceiptID}}</td><td>{{.Issuer}}</td><td>{{.Agent}}</td><td>{{.Tool}}</td>
<td class="bad">{{if .Error}}unreadable file{{else}}{{.FailedCheck}}{{end}}</td><td>{{if .Error}}{{.Error}}{{else}}{{.Detail}}{{end}}</td></tr>
{{end}}</table>{{if .S.FailuresOmitted}}<p class="muted">… and {{.S.FailuresOmitted}} more failed bundles not listed.</p>{{end}}{{end}}
<h2>Counts</h2><div class="groups">
{{range .Groups}}<div><h3>{{.Title}}</h3><table><tr><th></th><th>verified</th><th>failed</th></tr>
{{range .Rows}}<tr><td>{{.Key}}</td><td class="n">{{.Verified}}</td><td class="n{{if .Failed}} bad{{end}}">{{.Failed}}</td></tr>{{end}}</table></div>
{{end}}</div>
<h2>Receipts</h2>
<p class="muted">Each bundle in the order verified. A failed receipt's tool, agent and status are what it claims; nothing vouches for them.</p>
<table><tr><th>bundle</th><th>receipt id</th><th>result</th><th>issuer</th><th>agent</th><th>tool</th><th>status</th><th>execution</th></tr>
{{range .S.Receipts}}<tr><td class="path">{{.Path}}</td><td class="path">{{.ReceiptID}}</td>
{{if .Verified}}<td class="ok">verified</td><td>{{.Issuer}}</td><td>{{.Agent}}</td><td>{{.Tool}}</td><td>{{.Status}}</td><td>{{.Execution}}</td>
{{else}}<td class="bad">FAILED: {{if .Error}}unreadable file{{else}}{{.FailedCheck}}{{end}}</td><td class="muted">{{with .Issuer}}claimed: {{.}}{{end}}</td><td class="muted">{{with .Agent}}claimed: {{.}}{{end}}</td><td class="muted">{{with .Tool}}claimed: {{.}}{{end}}</td><td class="muted">{{with .Status}}claimed: {{.}}{{end}}</td><td class="muted">{{with .Execution}}claimed: {{.}}{{end}}</td>{{end}}</tr>
{{end}}</table>{{if .S.ReceiptsOmitted}}<p class="muted">… and {{.S.ReceiptsOmitted}} more bundles not listed.</p>{{end}}
<p class="muted">A verified receipt does not prove that the upstream's real side effect happened (unless attested), that the arguments were correct, that the named model produced the call, or that the operator is honest.</p>
</body></html>
`))
