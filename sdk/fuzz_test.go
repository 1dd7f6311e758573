package sdk_test

import (
	"encoding/json"
	"errors"
	"testing"

	"svc.dev/svc/sdk"
)

// FuzzParseConfig: the config parser never panics, and a config it accepts has exactly
// one log and absolute paths.
func FuzzParseConfig(f *testing.F) {
	seed, _ := json.Marshal(baseConfig())
	f.Add(seed)
	f.Add([]byte(`{"identity":{"keyFile":"k"},"agentId":"a","framework":"f","receiptsDir":"r","log":{"nats":"nats://h:4222","tenant":"t","timeoutMs":5}}`))
	f.Add([]byte(`{"identity":{"keyFile":"k"},"agentId":"a","framework":"f","receiptsDir":"r","log":{"url":"http://h/append"},"otel":{"url":"http://c","headersEnv":{"A":"B"}},"splunk":{"url":"http://s","tokenEnv":"T"}}`))
	f.Add([]byte(`{"agentId":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := sdk.ParseConfig(data, "/base")
		if err != nil {
			return
		}
		if (c.LogFile == "") == (c.Log == nil) {
			t.Fatalf("accepted a config without exactly one log: %+v", c)
		}
		if c.Identity.KeyFile == "" || c.Identity.KeyFile[0] != '/' || c.ReceiptsDir[0] != '/' {
			t.Fatalf("paths not resolved: %+v", c)
		}
	})
}

// FuzzParseRecordRequest: the /record body parser never panics, refuses only with an
// InputError, and what it accepts is a valid event and outcome.
func FuzzParseRecordRequest(f *testing.F) {
	for _, s := range []string{
		`{"event":{"tool":"search","args":{"q":"x"},"model":"m","session":{"id":"s","toolUseId":"u"}},"outcome":{"status":"executed","result":{"ok":true}}}`,
		`{"event":{"tool":"refund","args":{"amount":12.5}},"outcome":{"status":"denied","reason":"policy"},"policy":{"decision":"deny","reasons":[],"errors":["x"],"policyDigest":"` + zeros + `"}}`,
		`{"event":{"tool":"t","args":{}},"outcome":{"status":"error","error":"boom"},"policy":null}`,
		`{"event":{"tool":"t","args":{}},"outcome":{"status":"failed","result":null}}`,
		`{"event":null}`, `[]`, `{"event":{"tool":1}}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := sdk.ParseRecordRequest(data)
		if err != nil {
			var ie *sdk.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not an InputError", err)
			}
			return
		}
		if err := req.Event.Validate("event"); err != nil {
			t.Fatalf("accepted an invalid event: %v", err)
		}
		if err := req.Outcome.Validate(); err != nil {
			t.Fatalf("accepted an invalid outcome: %v", err)
		}
	})
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

// FuzzParseToolEvent: the /decide body parser never panics and refuses only with an
// InputError.
func FuzzParseToolEvent(f *testing.F) {
	for _, s := range []string{`{"tool":"search","args":{"q":"x"}}`, `{"tool":"t","args":{"a":1e400}}`, `{"tool":"t","args":[1]}`, `{"tool":"t"}`, `{}`, `null`, `{"tool":"t","args":{},"x":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := sdk.ParseToolEvent(data)
		if err != nil {
			var ie *sdk.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not an InputError", err)
			}
			return
		}
		if ev.Tool == "" || len(ev.Args) == 0 {
			t.Fatalf("accepted %+v", ev)
		}
	})
}
