package receipt

import (
	"encoding/json"
)

// SpecBase is {spec_base} of SPEC.md: the fixed base address of the receipt specification.
const SpecBase = "https://svc.dev/spec"

// Statement and predicate type URIs.
const (
	StatementType          = "https://in-toto.io/Statement/v1"
	PredicateReceipt       = SpecBase + "/receipt/v0.2"
	PredicateAuthorization = SpecBase + "/authorization/v0.1"
	// PredicateToolDefinitions is the tool-definitions statement's (tooldefs.go).
	PredicateToolDefinitions = SpecBase + "/tool-definitions/v0.1"
)

// Version is issuer.version: the release of this implementation. All packages move in
// lockstep (SPEC.md, Versioning).
const Version = "0.6.1"

// Provenance labels every descriptive field of a receipt.
type Provenance string

const (
	// Attested: signed by a key other than the issuer's (today, the principal's delegation key).
	Attested Provenance = "attested"
	// Observed: obtained by the issuer itself, outside the agent's control; gateways only.
	Observed Provenance = "observed"
	// Claimed: from the agent, the model or the agent's own process; unchecked.
	Claimed Provenance = "claimed"
)

// Issuer kinds.
const (
	KindGateway = "gateway" // out of process; enforces
	KindSDK     = "sdk"     // in the agent's process; self-reports
)

// Execution statuses.
const (
	StatusExecuted = "executed"
	StatusFailed   = "failed"
	StatusDenied   = "denied"
	StatusError    = "error"
	StatusWithheld = "withheld"
)

// Policy decisions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Statement is an in-toto Statement v1. Predicate is kept as JSON so one type serves
// receipts and authorizations.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Subject names the tool call and carries the digest of its arguments.
type Subject struct {
	Name   string            `json:"name"`   // tool-call:<tool>:<receiptId>
	Digest map[string]string `json:"digest"` // {"sha256": <digest of request.args>}
}

// Predicate is the receipt predicate ({spec_base}/receipt/v0.2).
type Predicate struct {
	ReceiptID     string          `json:"receiptId"`
	Timestamp     string          `json:"timestamp"`
	Issuer        IssuerInfo      `json:"issuer"`
	Principal     Principal       `json:"principal"`
	Agent         Agent           `json:"agent"`
	Delegation    *Delegation     `json:"delegation,omitempty"`
	Session       Session         `json:"session"`
	Model         Model           `json:"model"`
	Tool          Tool            `json:"tool"`
	Request       Request         `json:"request"`
	Facts         map[string]Fact `json:"facts"`
	Consumed      *Consumed       `json:"consumed,omitempty"`
	Relayed       *Relayed        `json:"relayed,omitempty"`
	Authorization *Authorization  `json:"authorization,omitempty"`
	Policy        *Policy         `json:"policy"` // null when no policy was evaluated
	Execution     Execution       `json:"execution"`
}

// AuthorizationPredicate is the predicate of the authorization statement
// ({spec_base}/authorization/v0.1): the receipt's fields that exist before the call is
// forwarded, and nothing about the outcome.
type AuthorizationPredicate struct {
	ReceiptID  string          `json:"receiptId"`
	Timestamp  string          `json:"timestamp"`
	Issuer     IssuerInfo      `json:"issuer"`
	Principal  Principal       `json:"principal"`
	Agent      Agent           `json:"agent"`
	Delegation *Delegation     `json:"delegation,omitempty"`
	Tool       Tool            `json:"tool"`
	Request    Request         `json:"request"`
	Facts      map[string]Fact `json:"facts"`
	Consumed   *Consumed       `json:"consumed,omitempty"`
	Policy     *Policy         `json:"policy"`
}

// IssuerInfo names who built the receipt. KeyID must equal the envelope signature's keyid.
type IssuerInfo struct {
	Kind      string `json:"kind"` // KindGateway or KindSDK
	KeyID     string `json:"keyid"`
	Version   string `json:"version"`
	Framework string `json:"framework,omitempty"` // SDK receipts: the host framework
}

// Principal is attested ({id, keyid}) when a delegation is present, else claimed
// ({id or null}).
type Principal struct {
	ID         *string    `json:"id"`
	KeyID      string     `json:"keyid,omitempty"`
	Provenance Provenance `json:"provenance"`
}

// Agent is attested with a delegation, else claimed.
type Agent struct {
	ID         string     `json:"id"`
	Provenance Provenance `json:"provenance"`
}

// Delegation embeds the signed grant (the whole chain when chained); always attested.
type Delegation struct {
	Envelope   *Envelope  `json:"envelope"`
	Provenance Provenance `json:"provenance"`
}

// Session carries correlation ids from the host, never checked.
type Session struct {
	ID         *string    `json:"id"`
	ToolUseID  *string    `json:"toolUseId"`
	Provenance Provenance `json:"provenance"`
}

// Model is the model id the agent claims.
type Model struct {
	ID         *string    `json:"id"`
	Provenance Provenance `json:"provenance"`
}

// Tool is observed on gateway receipts and claimed on SDK receipts.
type Tool struct {
	Name       string     `json:"name"`
	Upstream   string     `json:"upstream,omitempty"` // which upstream served it, when several are configured
	Provenance Provenance `json:"provenance"`
	// DefinitionDigest is the digest of the tool's canonical definition
	// (CanonicalToolDefinition) the call was made under. Optional, added after v0.2
	// shipped: observed on gateway receipts, claimed on SDK receipts.
	DefinitionDigest string `json:"definitionDigest,omitempty"`
	// DefinitionLeafIndex is the log leaf index of the tool-definitions statement that
	// logged DefinitionDigest; gateway receipts only, with DefinitionDigest.
	DefinitionLeafIndex *uint64 `json:"definitionLeafIndex,omitempty"`
}

// Request holds the call's arguments; ArgsDigest is their digest and equals the
// statement subject's digest.
type Request struct {
	Args       json.RawMessage `json:"args"`
	ArgsDigest string          `json:"argsDigest"`
	Provenance Provenance      `json:"provenance"`
}

// Fact is one lookup the gateway made itself before deciding.
type Fact struct {
	Tool         string          `json:"tool"`
	Args         json.RawMessage `json:"args"`
	Value        json.RawMessage `json:"value"`
	ResultDigest string          `json:"resultDigest"`
	Provenance   Provenance      `json:"provenance"`
}

// Consumed lists fact ids upstreams declared (via _meta "svc/facts") on earlier calls
// of the session. Gateway receipts only; added after v0.2 shipped, so optional.
type Consumed struct {
	FactIDs    []string   `json:"factIds"`
	Provenance Provenance `json:"provenance"`
}

// Relayed counts, by method, the requests the upstream sent the agent within the
// call (sampling/createMessage, elicitation/create, roots/list) and the gateway
// relayed. Gateway receipts only; claimed (the gateway relayed them, but what they
// asked and what the agent answered are the parties' word, not recorded); absent when
// there were none. Added after v0.2 shipped, so optional (docs/design/gateway.md,
// "Relayed requests in the receipt": proposed SPEC text).
type Relayed struct {
	Requests   map[string]uint64 `json:"requests"`
	Provenance Provenance        `json:"provenance"`
}

// Authorization is the pre-commit evidence embedded in a receipt: the signed
// authorization statement with the proof of its own log position.
type Authorization struct {
	Envelope  *Envelope `json:"envelope"`
	TreeHead  *Envelope `json:"treeHead"`
	Inclusion Inclusion `json:"inclusion"`
}

// Policy is the recorded policy decision. Reasons are ids of deciding policies; Errors
// are evaluation errors (any error is a deny). PolicyDigest is the SHA-256 of the
// policy text.
type Policy struct {
	Decision     string     `json:"decision"`
	Reasons      []string   `json:"reasons"`
	Errors       []string   `json:"errors"`
	PolicyDigest string     `json:"policyDigest"`
	Provenance   Provenance `json:"provenance"`
}

// Execution is the outcome. Which fields are present depends on Status:
// executed/failed: Result, ResultDigest, Upstream?; denied and withheld: Reason;
// error: Error.
type Execution struct {
	Status       string          `json:"status"`
	Result       json.RawMessage `json:"result,omitempty"`
	ResultDigest string          `json:"resultDigest,omitempty"`
	Upstream     json.RawMessage `json:"upstream,omitempty"` // an upstream attestation Envelope or a ProviderDelivery
	Reason       string          `json:"reason,omitempty"`
	Error        string          `json:"error,omitempty"`
	Provenance   Provenance      `json:"provenance"`
}

// Inclusion is an inclusion proof of a leaf in the tree of TreeSize leaves.
type Inclusion struct {
	LeafIndex uint64   `json:"leafIndex"`
	TreeSize  uint64   `json:"treeSize"`
	Hashes    []string `json:"hashes"`
}

// TreeHead is the payload of a signed tree head (application/vnd.svc.treehead+json).
type TreeHead struct {
	TreeSize  uint64 `json:"treeSize"`
	RootHash  string `json:"rootHash"`
	Timestamp string `json:"timestamp"`
	Log       string `json:"log,omitempty"` // the signing log, when the server runs more than one
}

// Bundle is receipts/<receiptId>.json: self-contained apart from public keys. The
// authorization file receipts/<receiptId>.authorization.json has the same shape.
type Bundle struct {
	Envelope  *Envelope `json:"envelope"`
	TreeHead  *Envelope `json:"treeHead"`
	Inclusion Inclusion `json:"inclusion"`
}

// UpstreamAttestation is the payload an upstream signs (application/vnd.svc.upstream+json)
// and places in its result's _meta under "svc/upstream-signature".
type UpstreamAttestation struct {
	ReceiptID     string `json:"receiptId"`
	Tool          string `json:"tool"`
	ContentDigest string `json:"contentDigest"` // digest of {content, isError} of the result
}

// Provider delivery kinds.
const (
	ProviderPaymentWebhook = "payment-webhook" // Stripe's scheme: t=<ts>,v1=<hmac of "<t>.<rawBody>">
	ProviderRepoDelivery   = "repo-delivery"   // GitHub's scheme: sha256=<hmac of rawBody>
)

// ProviderDelivery is a shared-secret attestation: a provider's delivery exactly as
// received, its signature header value, and a dot path into the body whose value must
// appear in the receipt's result.
type ProviderDelivery struct {
	Provider   string `json:"provider"`
	RawBody    string `json:"rawBody"`
	Signature  string `json:"signature"`
	Bind       string `json:"bind"`
	DeliveryID string `json:"deliveryId,omitempty"`
}
