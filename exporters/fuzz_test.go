package exporters_test

import (
	"encoding/json"
	"testing"

	"svc.dev/svc/exporters"
	"svc.dev/svc/receipt"
)

// FuzzFromBundle reads receipt-stream messages (bundles as JSON, from other processes):
// never a panic; an accepted one encodes for both collectors.
func FuzzFromBundle(f *testing.F) {
	ti := newTestIssuer(f, receipt.KindSDK)
	good, _ := json.Marshal(ti.simple(f))
	f.Add(good)
	f.Add([]byte(`{"envelope":{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}}`))
	f.Add([]byte(`{}`))
	s, err := exporters.NewSplunk(exporters.SplunkConfig{URL: "http://x", TokenEnv: "T"}, nil, func(string) (string, bool) { return "t", true })
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b receipt.Bundle
		if json.Unmarshal(data, &b) != nil {
			return
		}
		r, err := exporters.FromBundle(&b)
		if err != nil {
			return
		}
		if _, err := exporters.EncodeOTLP("svc", []*exporters.Record{r}); err != nil {
			t.Fatalf("encode OTLP: %v", err)
		}
		if _, err := json.Marshal(s.Event(r)); err != nil {
			t.Fatalf("encode HEC: %v", err)
		}
	})
}
