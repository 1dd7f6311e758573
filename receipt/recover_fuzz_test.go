package receipt

import (
	"encoding/json"
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
