package exporters

import "net/http"

// A kind is one kind of exporter. kinds is the one list of them: Config holds each
// kind's field (a member of a gateway or SDK config, which both embed Config), and
// Empty, Validate, Build, Kinds, the gateway, the SDK and `svc exports` all go
// through this list. Adding an exporter touches this package only: its file, its
// field in Config and its entry here.
type kind struct {
	// name is the kind's config field and its exporter's Name, which names the
	// exporter's queue, its durable consumer and its stderr lines.
	name string
	// configured reports whether a config sets the kind's field.
	configured func(c Config) bool
	// validate checks the field's form (not the environment); errors name the field.
	validate func(c Config) error
	// build makes the exporter, reading its environment variables; a missing
	// variable is an error naming the field.
	build func(c Config, client *http.Client, getenv func(string) (string, bool)) (Exporter, error)
}

var kinds = []kind{
	{
		name:       "otel",
		configured: func(c Config) bool { return c.OTel != nil },
		validate:   func(c Config) error { return c.OTel.validate() },
		build: func(c Config, client *http.Client, getenv func(string) (string, bool)) (Exporter, error) {
			return NewOTLP(*c.OTel, client, getenv)
		},
	},
	{
		name:       "splunk",
		configured: func(c Config) bool { return c.Splunk != nil },
		validate:   func(c Config) error { return c.Splunk.validate() },
		build: func(c Config, client *http.Client, getenv func(string) (string, bool)) (Exporter, error) {
			return NewSplunk(*c.Splunk, client, getenv)
		},
	},
}

// Kinds names every exporter kind by its config field, in the order Build makes
// them.
func Kinds() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return names
}
