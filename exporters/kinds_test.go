package exporters

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
)

// toyExporter is the exporter of the toy kind TestAKindIsOneEntry registers.
type toyExporter struct{}

func (toyExporter) Name() string                          { return "toy" }
func (toyExporter) Send(context.Context, []*Record) error { return nil }

// TestAKindIsOneEntry: a kind of exporter is one entry in kinds, and everything that
// lists, checks or builds exporters goes through that list (the gateway and the SDK
// through Config, Validate and New, `svc exports` through Build and Kinds). A toy kind,
// registered by this test only and configured by a switch where a shipped kind has
// its field in Config, is listed, checked, built and named with no other change.
func TestAKindIsOneEntry(t *testing.T) {
	on, bad := false, false
	kinds = append(kinds, kind{
		name:       "toy",
		configured: func(Config) bool { return on },
		validate: func(Config) error {
			if bad {
				return errors.New("toy.url is required")
			}
			return nil
		},
		build: func(Config, *http.Client, func(string) (string, bool)) (Exporter, error) { return toyExporter{}, nil },
	})
	t.Cleanup(func() { kinds = kinds[:len(kinds)-1] })

	if !slices.Equal(Kinds(), []string{"otel", "splunk", "toy"}) {
		t.Fatalf("Kinds() = %v", Kinds())
	}
	if !(Config{}).Empty() {
		t.Fatal("a config without the toy's field is not empty")
	}
	on = true
	if (Config{}).Empty() {
		t.Fatal("a config with the toy's field is empty")
	}
	exps, err := Build(Config{}, nil, nil)
	if err != nil || len(exps) != 1 || exps[0].Name() != "toy" {
		t.Fatalf("Build: %v, %v", exps, err)
	}
	s, err := New(context.Background(), Config{}, Options{})
	if err != nil || s == nil {
		t.Fatalf("New: %v, %v", s, err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	bad = true
	if err := (Config{}).Validate(); err == nil || err.Error() != "toy.url is required" {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := Build(Config{}, nil, nil); err == nil {
		t.Fatal("Build made an exporter its kind refuses")
	}
}
