package tenancy

import (
	"fmt"
	"strings"

	"svc.dev/svc/client"
)

// Bounds of a self-registered tenant id (SPEC.md, "Portal": 3 to 40 of a-z, 0-9, -),
// and the rule as the portal tells a person.
const (
	MinSelfRegisteredID = 3
	MaxSelfRegisteredID = 40
	SelfRegisteredRule  = "give 3 to 40 characters of a-z, 0-9 and -, starting with a letter or digit"
)

// CheckTenantID is the rule for every tenant id the log accepts, the operator's
// (svc log-admin, the admin API): 1 to 63 of a-z, 0-9, - and _, starting with a
// letter or digit (client.ValidTenant, which also names subjects and URLs). The
// error is ErrInvalid naming the rule.
func CheckTenantID(id string) error {
	if !client.ValidTenant(id) {
		return fmt.Errorf("%w: tenant id %q: use 1 to 63 of a-z, 0-9, - and _, starting with a letter or digit", ErrInvalid, id)
	}
	return nil
}

// CheckSelfRegisteredID is the stricter rule SPEC sets for a tenant registering
// itself (the portal): 3 to 40 of a-z, 0-9 and -, and also a valid tenant id
// (CheckTenantID, so starting with a letter or digit). The portal checks it before
// it creates anything.
func CheckSelfRegisteredID(id string) error {
	if len(id) < MinSelfRegisteredID || len(id) > MaxSelfRegisteredID ||
		strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || CheckTenantID(id) != nil {
		return fmt.Errorf("%w: tenant %q: %s", ErrInvalid, id, SelfRegisteredRule)
	}
	return nil
}
