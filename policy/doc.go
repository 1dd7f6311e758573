// Package policy evaluates Cedar policies (github.com/cedar-policy/cedar-go) for tool
// calls. The SDK issuer and its sidecar use it today; the gateway will use the same
// code, so one policy file means the same thing behind either issuer.
//
// # The request
//
// Each call becomes one Cedar request (SPEC.md, "Policy request and decision"):
//
//	principal  Agent::"<agent id>"
//	action     Action::"<tool name>"
//	resource   Tool::"<tool name>"
//	context    { args: <the call's arguments>,
//	             facts: { <fact name>: <value>, ... },
//	             grant: { principal: <string>, scopes: [<tool>, ...] } }
//
// The entity types are Agent, Action and Tool, unqualified. The entity store is empty:
// entities have no attributes and no parents, so a policy names them by id
// (principal == Agent::"billing-bot", action == Action::"refund",
// resource in [Tool::"a", Tool::"b"]) and reads everything else from the context.
//
// context.grant is present only when the call is made under a signed delegation (a
// gateway); the SDK issuer has none, so there `context has grant` is false and a
// policy that reads context.grant fails to evaluate, which is a deny. context.facts is
// {} when no facts were fetched (always, for the SDK).
//
// # JSON to Cedar
//
// Arguments and fact values are JSON; they become Cedar values as follows:
//
//	object   record (a duplicate key is an error)
//	array    set (Cedar sets are unordered and merge duplicates)
//	string   String
//	true/false  Boolean
//	null     absent: a member whose value is null is left out of its record (so
//	         `has` is false), and a null array element is left out of its set
//	integer  Long: a number with no fractional part that fits in 64 bits, however
//	         written (12, 12.0, 1.2e1 are all Long 12)
//	other number  Float::"<the JSON text>", an entity reference
//
// Cedar has no floating point, and SPEC.md says a float in args that a policy touches
// is an evaluation error and therefore a deny. A non-integer number (12.5) or an
// integer too large for a Long (1e30) is carried as a reference to an entity of type
// Float whose id is the number exactly as written. No Float entity exists, so every
// numeric use of it fails: <, <=, > and >= are type errors ("expected comparable
// value"), arithmetic is a type error, attribute access is "entity not found", like
// is a type error. `context.args.amount <= 100` with amount 12.5 is therefore an
// evaluation error, and the decision is deny with that error recorded. Equality
// compares the reference, so `context.args.amount == 12` is false for 12.5, which is
// also the true answer. A policy can refuse fractional amounts outright with
// `forbid (principal, action, resource) when { context.args.amount is Float };`.
//
// # The decision
//
// Default deny; a forbid beats every permit; any evaluation error makes the decision
// deny and is recorded in errors, even when some permit was satisfied (Cedar itself
// would allow in that case; SPEC.md does not). reasons are the ids of the deciding
// policies: the satisfied forbids on a deny by forbid, the satisfied permits on an
// allow, and none on a default deny or a deny by error. A policy's id is its
// @id("...") annotation, or Cedar's positional id (policy0, policy1, ...) when it has
// none; two policies with the same @id are refused when the file is loaded. errors
// read `<policy id>: <Cedar's message>`. reasons and errors are sorted.
// policyDigest is the hex SHA-256 of the policy file's bytes.
package policy
