package logserver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
)

// TestEntryBundlesSurviveRestart: the entry-bundle projection resumes after a restart
// (and after a torn index record and a data file shorter than its index, as a crash
// mid-write can leave them) and serves the same
// bundles, full and partial, as the leaves were committed.
func TestEntryBundlesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	tenants := []logtest.Tenant{{ID: "open"}}
	leaf := func(i int) string { return fmt.Sprintf("restart leaf %d", i) }
	l := logtest.Start(t, logtest.Options{Dir: dir, Tenants: tenants})
	for i := 0; i < 300; i++ {
		do(t, "POST", l.Base("open")+"/add", "", leaf(i))
	}
	waitBundle(t, l.Base("open"), "001.p/44", 44)
	l.Service.Close()
	// A crash mid-write: a torn index record after the last full bundle.
	idx := filepath.Join(dir, "data", "tenants", "open", "entries", "bundles.idx")
	f, err := os.OpenFile(idx, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{1, 2, 3, 4, 5})
	f.Close()
	// ... and data that lost its tail although the index kept the record.
	if err := os.Truncate(filepath.Join(filepath.Dir(idx), "bundles.data"), 100); err != nil {
		t.Fatal(err)
	}

	l = logtest.Start(t, logtest.Options{Dir: dir, Tenants: tenants})
	for i := 300; i < 600; i++ {
		do(t, "POST", l.Base("open")+"/add", "", leaf(i))
	}
	base := l.Base("open")
	waitBundle(t, base, "002.p/88", 88)
	for b, w := range map[int]int{0: 256, 1: 256, 2: 88} {
		path := fmt.Sprintf("%03d", b)
		if w < 256 {
			path += fmt.Sprintf(".p/%d", w)
		}
		code, _, body := get(t, base+"/tile/entries/"+path, "")
		if code != 200 {
			t.Fatalf("bundle %s: %d %s", path, code, body)
		}
		got := splitBundle(t, []byte(body))
		if len(got) != w {
			t.Fatalf("bundle %s holds %d entries", path, len(got))
		}
		for j, e := range got {
			if e != leaf(b*256+j) {
				t.Fatalf("bundle %s entry %d = %q, want %q", path, j, e, leaf(b*256+j))
			}
		}
	}
}

func waitBundle(t *testing.T, base, path string, n int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		code, _, body := get(t, base+"/tile/entries/"+path, "")
		if code != 200 || len(splitBundle(t, []byte(body))) != n {
			return fmt.Errorf("bundle %s: %d %.100s", path, code, body)
		}
		return nil
	})
}
