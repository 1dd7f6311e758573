package exporters

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"svc.dev/svc/pipeline"
)

// Splunk exports one event per receipt to a Splunk HTTP Event Collector: POST
// <url>/services/collector/event with "Authorization: Splunk <token>". A batch is
// one request whose body is the events one after another, as the collector accepts.
type Splunk struct {
	url     string
	header  http.Header
	source  string
	stype   string
	index   string
	host    string
	client  *http.Client
	timeout time.Duration
}

// HECEvent is one event as sent: { time, source, sourcetype, index?, host?, event }.
// Time is seconds since the epoch with milliseconds: the receipt's timestamp.
type HECEvent struct {
	Time       json.Number `json:"time"`
	Source     string      `json:"source"`
	Sourcetype string      `json:"sourcetype"`
	Index      string      `json:"index,omitempty"`
	Host       string      `json:"host,omitempty"`
	Event      HECFields   `json:"event"`
}

// HECFields is the event's body: every field SPEC.md names, null when the receipt has
// none. receipt_id makes a re-delivered event recognisable (dedupe on it).
type HECFields struct {
	ReceiptID              string   `json:"receipt_id"`
	IssuerKind             string   `json:"issuer_kind"`
	IssuerKeyID            string   `json:"issuer_keyid"`
	Tool                   string   `json:"tool"`
	Upstream               *string  `json:"upstream"`
	Agent                  string   `json:"agent"`
	AgentProvenance        string   `json:"agent_provenance"`
	Principal              *string  `json:"principal"`
	Status                 string   `json:"status"`
	Reason                 *string  `json:"reason"`
	PolicyDecision         *string  `json:"policy_decision"`
	PolicyDigest           *string  `json:"policy_digest"`
	PolicyReasons          []string `json:"policy_reasons"`
	ArgsDigest             string   `json:"args_digest"`
	LogLeafIndex           uint64   `json:"log_leaf_index"`
	LogTreeSize            uint64   `json:"log_tree_size"`
	AuthorizationLeafIndex *uint64  `json:"authorization_leaf_index"`
	ConsumedCount          *int     `json:"consumed_count"`
	Model                  *string  `json:"model"`
	Session                *string  `json:"session"`
}

// NewSplunk reads the token from the variable named by cfg.TokenEnv (missing: an
// error naming the field) and makes the exporter. getenv nil means os.LookupEnv.
func NewSplunk(cfg SplunkConfig, client *http.Client, getenv func(string) (string, bool)) (*Splunk, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tok, err := pipeline.ConfigEnv(getenv, "splunk.tokenEnv", cfg.TokenEnv)
	if err != nil {
		return nil, err
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.Sourcetype == "" {
		cfg.Sourcetype = DefaultSourcetype
	}
	if client == nil {
		client = &http.Client{}
	}
	return &Splunk{
		url: join(cfg.URL, "/services/collector/event"), header: http.Header{"Authorization": {"Splunk " + tok}},
		source: cfg.Source, stype: cfg.Sourcetype, index: cfg.Index, host: cfg.Host, client: client, timeout: DefaultTimeout,
	}, nil
}

// Name is "splunk".
func (s *Splunk) Name() string { return "splunk" }

// Event is the HEC event for one record.
func (s *Splunk) Event(r *Record) HECEvent {
	ms := r.Timestamp.UnixMilli()
	return HECEvent{
		Time:       json.Number(fmt.Sprintf("%d.%03d", ms/1000, ms%1000)),
		Source:     s.source,
		Sourcetype: s.stype,
		Index:      s.index,
		Host:       s.host,
		Event: HECFields{
			ReceiptID: r.ReceiptID, IssuerKind: r.IssuerKind, IssuerKeyID: r.IssuerKeyID,
			Tool: r.Tool, Upstream: r.Upstream, Agent: r.Agent, AgentProvenance: r.AgentProvenance,
			Principal: r.Principal, Status: r.Status, Reason: r.Reason,
			PolicyDecision: r.PolicyDecision, PolicyDigest: r.PolicyDigest, PolicyReasons: r.PolicyReasons,
			ArgsDigest: r.ArgsDigest, LogLeafIndex: r.LogLeafIndex, LogTreeSize: r.LogTreeSize,
			AuthorizationLeafIndex: r.AuthorizationLeafIndex, ConsumedCount: r.ConsumedCount,
			Model: r.Model, Session: r.Session,
		},
	}
}

// Send posts the batch's events in one request.
func (s *Splunk) Send(ctx context.Context, recs []*Record) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	for _, r := range recs {
		var ev any = s.Event(r)
		if r.Change != nil {
			ev = s.ChangeEvent(r.Change)
		}
		if err := enc.Encode(ev); err != nil {
			return fmt.Errorf("%w: %v", ErrPermanent, err)
		}
	}
	_, err := post(ctx, s.client, s.timeout, s.url, s.header, body.Bytes())
	return err
}
