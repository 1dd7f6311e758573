package sdk

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"svc.dev/svc/policy"
	"svc.dev/svc/receipt"
)

// ToolEvent is SPEC.md's ToolEvent: { tool, args, model?, session?: { id, toolUseId } }.
// Everything in it is recorded as claimed.
type ToolEvent struct {
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"` // a JSON object; {} for a call without arguments
	Model   *string         `json:"model,omitempty"`
	Session *SessionIDs     `json:"session,omitempty"`
	// DefinitionDigest is the digest of the tool's canonical definition
	// (receipt.CanonicalToolDefinition) as the caller knows it; recorded as the
	// receipt's tool.definitionDigest, claimed. Optional: 64 lowercase hex digits.
	DefinitionDigest string `json:"definitionDigest,omitempty"`
}

// SessionIDs are the host's correlation ids, recorded as claimed and never checked.
type SessionIDs struct {
	ID        *string `json:"id"`
	ToolUseID *string `json:"toolUseId"`
}

// PolicyDecision is SPEC.md's PolicyDecision: { decision, reasons, errors,
// policyDigest }, as the policy package produces it.
type PolicyDecision = policy.Decision

// Outcome is what became of the call. Exactly one variant:
//
//	{ status: executed, result }  the tool ran and answered
//	{ status: failed,   result }  the tool ran and reported failure
//	{ status: denied,   reason }  policy said no and the tool was not called
//	{ status: error,    error }   the tool threw
//
// withheld is a gateway state (a pre-committed call the log refused) and is not used
// by the SDK.
type Outcome struct {
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Error  string          `json:"error,omitempty"`
	err    error           // from a constructor that could not encode the result
}

// Executed is the outcome of a tool that ran and answered; result is encoded as JSON.
func Executed(result any) Outcome { return withResult(receipt.StatusExecuted, result) }

// Failed is the outcome of a tool that ran and reported failure.
func Failed(result any) Outcome { return withResult(receipt.StatusFailed, result) }

// Denied is the outcome of a call the policy refused; the tool was not called.
func Denied(reason string) Outcome { return Outcome{Status: receipt.StatusDenied, Reason: reason} }

// Errored is the outcome of a tool that threw or could not be reached.
func Errored(message string) Outcome { return Outcome{Status: receipt.StatusError, Error: message} }

func withResult(status string, result any) Outcome {
	if raw, ok := result.(json.RawMessage); ok {
		return Outcome{Status: status, Result: raw}
	}
	raw, err := json.Marshal(result)
	return Outcome{Status: status, Result: raw, err: err}
}

// RecordRequest is the body of the sidecar's POST /record: { event, outcome, policy? }.
type RecordRequest struct {
	Event   ToolEvent       `json:"event"`
	Outcome Outcome         `json:"outcome"`
	Policy  *PolicyDecision `json:"policy,omitempty"` // what /decide returned, or null
}

// InputError is a malformed event, outcome or policy decision: the caller's mistake
// (the sidecar answers 400). Its message names what was wrong.
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

func inputErr(format string, a ...any) error { return &InputError{fmt.Sprintf(format, a...)} }

// MaxToolName caps a tool name.
const MaxToolName = 256

// Validate checks an event; errors are *InputError naming the field under prefix
// ("event" in /record, "" in /decide).
func (ev *ToolEvent) Validate(prefix string) error {
	f := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	switch {
	case ev.Tool == "":
		return inputErr("%s is required: the name of the tool called", f("tool"))
	case len(ev.Tool) > MaxToolName:
		return inputErr("%s is %d bytes long; at most %d", f("tool"), len(ev.Tool), MaxToolName)
	case strings.ContainsFunc(ev.Tool, unicode.IsControl):
		return inputErr("%s %q contains a control character", f("tool"), ev.Tool)
	case ev.DefinitionDigest != "" && !receipt.IsDigestHex(ev.DefinitionDigest):
		return inputErr("%s %q is not a SHA-256 digest (64 lowercase hex digits) of the tool's canonical definition", f("definitionDigest"), ev.DefinitionDigest)
	}
	args := bytes.TrimSpace(ev.Args)
	if len(args) == 0 {
		return inputErr("%s is required: a JSON object of the call's arguments ({} for none)", f("args"))
	}
	if args[0] != '{' {
		return inputErr("%s must be a JSON object, got %s", f("args"), jsonKind(args))
	}
	if _, err := receipt.CanonicalizeJSON(args); err != nil {
		return inputErr("%s: %v", f("args"), err)
	}
	if ev.Session != nil {
		if ev.Session.ID != nil && *ev.Session.ID == "" {
			return inputErr("%s is empty; give a string or null", f("session.id"))
		}
		if ev.Session.ToolUseID != nil && *ev.Session.ToolUseID == "" {
			return inputErr("%s is empty; give a string or null", f("session.toolUseId"))
		}
	}
	if ev.Model != nil && *ev.Model == "" {
		return inputErr("%s is empty; give a string or null", f("model"))
	}
	return nil
}

// Validate checks an outcome; errors are *InputError naming the field.
func (o *Outcome) Validate() error {
	if o.err != nil {
		return inputErr("outcome.result: %v", o.err)
	}
	hasResult := o.Result != nil
	switch o.Status {
	case receipt.StatusExecuted, receipt.StatusFailed:
		if !hasResult {
			return inputErr("outcome.result is required with status %s (any JSON value, null included)", o.Status)
		}
		if _, err := receipt.CanonicalizeJSON(o.Result); err != nil {
			return inputErr("outcome.result: %v", err)
		}
		if o.Reason != "" || o.Error != "" {
			return inputErr("outcome with status %s takes result only, not reason or error", o.Status)
		}
	case receipt.StatusDenied:
		if o.Reason == "" {
			return inputErr("outcome.reason is required with status denied: why the call was refused")
		}
		if hasResult || o.Error != "" {
			return inputErr("outcome with status denied takes reason only, not result or error")
		}
	case receipt.StatusError:
		if o.Error == "" {
			return inputErr("outcome.error is required with status error: what the tool threw")
		}
		if hasResult || o.Reason != "" {
			return inputErr("outcome with status error takes error only, not result or reason")
		}
	case receipt.StatusWithheld:
		return inputErr("outcome.status withheld is a gateway state; the SDK records executed, failed, denied or error")
	case "":
		return inputErr("outcome.status is required: executed, failed, denied or error")
	default:
		return inputErr("outcome.status %q is not one of executed, failed, denied, error", o.Status)
	}
	return nil
}

// validateDecision checks a claimed policy decision's form.
func validateDecision(d *PolicyDecision) error {
	if d.Decision != policy.Allow && d.Decision != policy.Deny {
		return inputErr("policy.decision %q is not allow or deny", d.Decision)
	}
	if raw, err := hex.DecodeString(d.PolicyDigest); err != nil || len(raw) != 32 || strings.ToLower(d.PolicyDigest) != d.PolicyDigest {
		return inputErr("policy.policyDigest %q is not 64 lowercase hex digits (the SHA-256 of the policy text)", d.PolicyDigest)
	}
	for i, r := range d.Reasons {
		if r == "" {
			return inputErr("policy.reasons[%d] is empty", i)
		}
	}
	return nil
}

// ParseToolEvent reads the body of POST /decide strictly: unknown fields, trailing
// data and a missing or malformed field are *InputError.
func ParseToolEvent(data []byte) (*ToolEvent, error) {
	var ev ToolEvent
	if err := decodeStrict(data, &ev, "event"); err != nil {
		return nil, err
	}
	if err := ev.Validate(""); err != nil {
		return nil, err
	}
	return &ev, nil
}

// ParseRecordRequest reads the body of POST /record strictly.
func ParseRecordRequest(data []byte) (*RecordRequest, error) {
	var raw struct {
		Event   *json.RawMessage `json:"event"`
		Outcome *json.RawMessage `json:"outcome"`
		Policy  *json.RawMessage `json:"policy"`
	}
	if err := decodeStrict(data, &raw, "body"); err != nil {
		return nil, err
	}
	var req RecordRequest
	switch {
	case raw.Event == nil || string(*raw.Event) == "null":
		return nil, inputErr("event is required: the ToolEvent { tool, args, model?, session? }")
	case raw.Outcome == nil || string(*raw.Outcome) == "null":
		return nil, inputErr("outcome is required: { status, result | reason | error }")
	}
	if err := decodeStrict(*raw.Event, &req.Event, "event"); err != nil {
		return nil, err
	}
	if err := req.Event.Validate("event"); err != nil {
		return nil, err
	}
	if err := decodeStrict(*raw.Outcome, &req.Outcome, "outcome"); err != nil {
		return nil, err
	}
	if err := req.Outcome.Validate(); err != nil {
		return nil, err
	}
	if raw.Policy != nil && string(*raw.Policy) != "null" {
		var d PolicyDecision
		if err := decodeStrict(*raw.Policy, &d, "policy"); err != nil {
			return nil, err
		}
		if d.Reasons == nil {
			d.Reasons = []string{}
		}
		if d.Errors == nil {
			d.Errors = []string{}
		}
		if err := validateDecision(&d); err != nil {
			return nil, err
		}
		req.Policy = &d
	}
	return &req, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and trailing
// data, with errors naming what.
func decodeStrict(data []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return inputErr("%s is empty; want a JSON object", what)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				return inputErr("%s must be a JSON object, got %s", what, te.Value)
			}
			return inputErr("%s.%s: want %s, got %s", what, field, jsonTypeName(te.Type.String()), te.Value)
		}
		return inputErr("%s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return inputErr("%s: unexpected data after the JSON object", what)
	}
	return nil
}

func jsonTypeName(goType string) string {
	switch {
	case goType == "string", goType == "*string":
		return "a string"
	case strings.HasPrefix(goType, "[]string"):
		return "an array of strings"
	case strings.Contains(goType, "SessionIDs"):
		return "an object { id, toolUseId }"
	}
	return goType
}

func jsonKind(raw []byte) string {
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}
