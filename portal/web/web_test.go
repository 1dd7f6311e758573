package web

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(FS, name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStrictCSP: nothing in the served tree needs more than Content-Security-Policy
// default-src 'self': no inline script or style element, no style attribute, no
// event-handler attribute, no javascript: address, and every script, style sheet and
// icon is a relative path to a file in FS.
func TestStrictCSP(t *testing.T) {
	html := read(t, "index.html")
	checks := []struct {
		re   string
		what string
	}{
		{`(?is)<script(?:\s[^>]*)?>\s*[^<\s]`, "an inline script"},
		{`(?i)<style`, "a style element"},
		{`(?i)\sstyle\s*=`, "a style attribute"},
		{`(?i)\son[a-z]+\s*=`, "an event-handler attribute"},
		{`(?i)javascript:`, "a javascript: address"},
	}
	for _, c := range checks {
		if m := regexp.MustCompile(c.re).FindString(html); m != "" {
			t.Errorf("index.html has %s: %q", c.what, m)
		}
	}
	for _, tag := range regexp.MustCompile(`(?i)<script[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(tag, "src=") {
			t.Errorf("index.html has a script element without src: %s", tag)
		}
	}
	for _, m := range regexp.MustCompile(`(?i)(?:src|href)="([^"#]+)"`).FindAllStringSubmatch(html, -1) {
		ref := m[1]
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "//") || strings.HasPrefix(ref, "/") {
			t.Errorf("index.html refers to %q: only relative paths inside the tree", ref)
			continue
		}
		if _, err := fs.Stat(FS, ref); err != nil {
			t.Errorf("index.html refers to %q, which is not in the tree: %v", ref, err)
		}
	}
	js := read(t, "app.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", ".cssText"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}

// TestNothingFromElsewhere: no asset names another origin (no CDN, font or image from
// outside). The SVG namespace is an identifier, not a fetch.
func TestNothingFromElsewhere(t *testing.T) {
	err := fs.WalkDir(FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		text := strings.ReplaceAll(read(t, path), "http://www.w3.org/2000/svg", "")
		if m := regexp.MustCompile(`(?i:https?://\S*|@import)|url\(`).FindString(text); m != "" {
			t.Errorf("%s names another resource: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWritesAreJSON: the page talks to the portal through one function, and it sends
// every write with a JSON body and Content-Type: application/json.
func TestWritesAreJSON(t *testing.T) {
	js := read(t, "app.js")
	if n := strings.Count(js, "fetch("); n != 1 {
		t.Errorf("app.js calls fetch %d times; want one call, in api()", n)
	}
	for _, want := range []string{`init.headers['Content-Type'] = 'application/json';`, `init.body = JSON.stringify(`} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js does not contain %q", want)
		}
	}
	for _, m := range regexp.MustCompile(`api\('(POST|GET)', '([^']+)'`).FindAllStringSubmatch(js, -1) {
		if m[1] == "POST" && !strings.HasPrefix(m[2], "/api/") {
			t.Errorf("a write to %s, outside /api/", m[2])
		}
	}
}
