package conformance

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/receipt"
)

// PaymentTolerance is how far a payment delivery's timestamp may be from the receipt's.
const PaymentTolerance = 5 * time.Minute

// upstreamKind classifies execution.upstream: "", "attestation" or "delivery".
func upstreamKind(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) != nil {
		return "unknown"
	}
	if _, ok := probe["payloadType"]; ok {
		return "attestation"
	}
	if _, ok := probe["provider"]; ok {
		return "delivery"
	}
	return "unknown"
}

// upstream runs the upstream attestation checks that the inputs allow.
func (v *verification) upstream() {
	e := v.pred.Execution
	switch upstreamKind(e.Upstream) {
	case "attestation":
		if len(v.opts.UpstreamKeys) == 0 {
			v.r.Notes = append(v.r.Notes, "the result carries an upstream signature; give --upstream-key to check it")
			return
		}
		err := v.checkAttestation()
		v.r.add(CheckUpstreamKey, err == nil, "%s", errOr(err, "upstream signed this receipt id, tool and content"))
	case "delivery":
		var d receipt.ProviderDelivery
		if err := json.Unmarshal(e.Upstream, &d); err != nil {
			v.r.add(CheckProviderSecret, false, "provider delivery: %v", err)
			return
		}
		secret, ok := v.opts.ProviderSecrets[d.Provider]
		if !ok {
			v.r.Notes = append(v.r.Notes, fmt.Sprintf("the result carries a %s delivery; it was carried and not checked (no secret given)", d.Provider))
			return
		}
		err := v.checkDelivery(&d, secret)
		v.r.add(CheckProviderSecret, err == nil, "%s", errOr(err, fmt.Sprintf("%s HMAC verifies and %s is bound to the result", d.Provider, d.Bind)))
	case "unknown":
		v.r.add(CheckUpstreamKey, false, "execution.upstream is neither an upstream signature nor a provider delivery")
	}
}

func (v *verification) checkAttestation() error {
	p := v.pred
	env, err := receipt.ParseEnvelope(p.Execution.Upstream)
	if err != nil {
		return err
	}
	k, err := env.Verify(v.opts.UpstreamKeys)
	if err != nil {
		return err
	}
	var a receipt.UpstreamAttestation
	if err := env.DecodePayload(receipt.PayloadUpstream, &a); err != nil {
		return err
	}
	if a.ReceiptID != p.ReceiptID {
		return fmt.Errorf("signed for receipt %q, this is %q", a.ReceiptID, p.ReceiptID)
	}
	if a.Tool != p.Tool.Name {
		return fmt.Errorf("signed for tool %q, this is %q", a.Tool, p.Tool.Name)
	}
	d, err := ContentDigest(p.Execution.Result)
	if err != nil {
		return err
	}
	if a.ContentDigest != d {
		return fmt.Errorf("signed content digest %s, result's is %s", short(a.ContentDigest), short(d))
	}
	v.attestedBy = k.KeyID
	return nil
}

// ContentDigest is the digest of {content, isError} of an MCP tool result: the part
// the agent receives. A missing isError counts as false.
func ContentDigest(result json.RawMessage) (string, error) {
	var r struct {
		Content json.RawMessage `json:"content"`
		IsError bool            `json:"isError"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return "", fmt.Errorf("result is not an MCP tool result: %w", err)
	}
	if r.Content == nil {
		r.Content = json.RawMessage("null")
	}
	return receipt.Digest(struct {
		Content json.RawMessage `json:"content"`
		IsError bool            `json:"isError"`
	}{r.Content, r.IsError})
}

func (v *verification) checkDelivery(d *receipt.ProviderDelivery, secret []byte) error {
	switch d.Provider {
	case receipt.ProviderPaymentWebhook:
		at, err := receipt.ParseTime(v.pred.Timestamp)
		if err != nil {
			return err
		}
		if err := VerifyPaymentSignature([]byte(d.RawBody), d.Signature, secret, at, PaymentTolerance); err != nil {
			return err
		}
	case receipt.ProviderRepoDelivery:
		if err := VerifyRepoSignature([]byte(d.RawBody), d.Signature, secret); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown provider %q", d.Provider)
	}
	val, err := lookupPath([]byte(d.RawBody), d.Bind)
	if err != nil {
		return err
	}
	if !appearsIn(val, v.pred.Execution.Result) {
		return fmt.Errorf("bound value %s (%s) does not appear in the result", compact(val), d.Bind)
	}
	v.attestedBy = "shared secret"
	return nil
}

// VerifyPaymentSignature checks a Stripe-scheme signature header
// "t=<unix>,v1=<hex hmac-sha256 of "<t>.<body>">" (several v1 values allowed) and that
// t lies within tolerance of at.
func VerifyPaymentSignature(body []byte, header string, secret []byte, at time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = val
		case "v1":
			if b, err := hex.DecodeString(val); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if ts == "" || len(sigs) == 0 {
		return errors.New("signature header lacks t= or v1=")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("signature timestamp %q: %w", ts, err)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	matched := false
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			matched = true
		}
	}
	if !matched {
		return errors.New("HMAC does not verify with the given secret")
	}
	if d := at.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("delivery timestamp is %s from the receipt's; the tolerance is %s", d.Round(time.Second), tolerance)
	}
	return nil
}

// VerifyRepoSignature checks a GitHub-scheme header "sha256=<hex hmac-sha256 of body>".
func VerifyRepoSignature(body []byte, header string, secret []byte) error {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return errors.New(`signature header does not start with "sha256="`)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return fmt.Errorf("signature is not hex: %w", err)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errors.New("HMAC does not verify with the given secret")
	}
	return nil
}

// lookupPath follows a dot path ("data.object.id", array indices as numbers) into JSON.
func lookupPath(body []byte, path string) (json.RawMessage, error) {
	cur := json.RawMessage(body)
	if path == "" {
		return nil, errors.New("bind path is empty")
	}
	for _, seg := range strings.Split(path, ".") {
		var obj map[string]json.RawMessage
		if json.Unmarshal(cur, &obj) == nil {
			next, ok := obj[seg]
			if !ok {
				return nil, fmt.Errorf("bind path %q: no field %q in the delivery", path, seg)
			}
			cur = next
			continue
		}
		var arr []json.RawMessage
		i, err := strconv.Atoi(seg)
		if json.Unmarshal(cur, &arr) != nil || err != nil || i < 0 || i >= len(arr) {
			return nil, fmt.Errorf("bind path %q: cannot follow %q", path, seg)
		}
		cur = arr[i]
	}
	return cur, nil
}

// appearsIn reports whether val (a JSON scalar) appears in result: as an equal value
// anywhere in its JSON tree, or, for strings and numbers, inside any string of it (a
// text content block that mentions the id).
func appearsIn(val, result json.RawMessage) bool {
	want, err := receipt.CanonicalizeJSON(val)
	if err != nil {
		return false
	}
	var text string
	if json.Unmarshal(val, &text) != nil {
		text = string(want) // a number
	}
	if text == "" {
		return false
	}
	var walk func(any) bool
	walk = func(x any) bool {
		switch t := x.(type) {
		case map[string]any:
			for _, c := range t {
				if walk(c) {
					return true
				}
			}
		case []any:
			for _, c := range t {
				if walk(c) {
					return true
				}
			}
		case string:
			return strings.Contains(t, text)
		default:
			c, err := receipt.Canonical(t)
			return err == nil && bytes.Equal(c, want)
		}
		return false
	}
	var tree any
	if json.Unmarshal(result, &tree) != nil {
		return false
	}
	return walk(tree)
}

func (v *verification) executionProvenance() string {
	switch v.attestedBy {
	case "":
		return string(v.pred.Execution.Provenance)
	case "shared secret":
		return "attested (shared secret)"
	default:
		return "attested (upstream key " + short(v.attestedBy) + ")"
	}
}
