package receipt

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// FuzzParseMark: the mark file of a receipts directory is read at every start; any
// content gives a mark or an error naming the file, never a panic.
func FuzzParseMark(f *testing.F) {
	root := `"root":"` + strings.Repeat("ab", 32) + `"`
	for _, s := range []string{`{"logFile":"/data/receipts.log","durableBelow":12,` + root + `}`, `{"logFile":"x","durableBelow":1,"root":"zz"}`, `{"logFile":""}`, `{}`, `{"logFile":"x","durableBelow":-1}`,
		`{"logFile":"x","extra":1}`, `{"logFile":"x"} {}`, `null`, ``, `{"durableBelow":1e30,"logFile":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseMark(data)
		if err != nil {
			if len(err.Error()) < len(MarkFile) || err.Error()[:len(MarkFile)] != MarkFile {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if m.LogFile == "" {
			t.Fatal("accepted a mark without its log file")
		}
		again, _ := json.Marshal(m)
		if m2, err := parseMark(again); err != nil || m2 != m {
			t.Fatalf("round trip: %v %+v %+v", err, m, m2)
		}
	})
}

// FuzzIsReceiptFileID: a receipt id names a file, and the byte-by-byte check accepts
// exactly what the pattern SPEC's file names follow accepts.
func FuzzIsReceiptFileID(f *testing.F) {
	for _, s := range []string{"0b6f3c1e-9a2d-4f5b-8c7e-1d2a3b4c5d6e", "a", "-a", "_a", "a-_9Z", "", "a b", "a/b", "..", "é", strings.Repeat("a", 128), strings.Repeat("a", 129), "a\n"} {
		f.Add(s)
	}
	pattern := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := isReceiptFileID(id), pattern.MatchString(id); got != want {
			t.Fatalf("isReceiptFileID(%q) = %v, the pattern says %v", id, got, want)
		}
	})
}
