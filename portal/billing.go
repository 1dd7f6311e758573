package portal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/httpjson"
	"svc.dev/svc/httplimits"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"

	"svc.dev/svc/internal/tenancy"
)

// Billing configures the payment provider (Stripe).
type Billing struct {
	// SecretKey is the provider's API key (sk_...); required.
	SecretKey string
	// WebhookSecret verifies the signature of webhook deliveries (whsec_...); required.
	WebhookSecret string
	// TeamPrice is the provider's price id of the team plan (price_...); required.
	TeamPrice string
	// APIURL, when set, is the provider's API base URL instead of the real one
	// (stripe-mock in tests).
	APIURL string
	// HTTPClient calls the provider; default a client with a 20 s timeout.
	HTTPClient *http.Client
}

type billing struct {
	cfg Billing
	sc  *stripe.Client
}

func newBilling(cfg Billing) (*billing, error) {
	if cfg.SecretKey == "" || cfg.WebhookSecret == "" || cfg.TeamPrice == "" {
		return nil, errors.New("portal: billing needs the API key, the webhook secret and the team plan's price id")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 20 * time.Second}
	}
	retries := int64(2)
	bc := &stripe.BackendConfig{HTTPClient: cfg.HTTPClient, MaxNetworkRetries: &retries,
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelError}}
	if cfg.APIURL != "" {
		u := strings.TrimRight(cfg.APIURL, "/")
		bc.URL = &u
	}
	sc := stripe.NewClient(cfg.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(bc)))
	return &billing{cfg: cfg, sc: sc}, nil
}

func (p *Portal) noBilling(w http.ResponseWriter) bool {
	if p.billing != nil {
		return false
	}
	httpjson.WriteError(w, http.StatusServiceUnavailable, "billing is not configured on this portal")
	return true
}

func (p *Portal) handleCheckout(w http.ResponseWriter, r *http.Request, a account) {
	var q emptyRequest
	if !decode(w, r, &q) || p.noBilling(w) {
		return
	}
	t, err := p.tenant(r.Context(), a)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	if t.Plan != tenancy.PlanFree {
		httpjson.WriteError(w, http.StatusConflict, "checkout is for the free plan; this tenant is on "+t.Plan+" (manage billing instead)")
		return
	}
	params := &stripe.CheckoutSessionCreateParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModeSubscription)),
		LineItems:         []*stripe.CheckoutSessionCreateLineItemParams{{Price: stripe.String(p.billing.cfg.TeamPrice), Quantity: stripe.Int64(1)}},
		SuccessURL:        stripe.String(p.portalURL + "/?checkout=done"),
		CancelURL:         stripe.String(p.portalURL + "/?checkout=cancelled"),
		ClientReferenceID: stripe.String(t.ID),
		Metadata:          map[string]string{"tenant": t.ID},
	}
	if a.Customer != "" {
		params.Customer = stripe.String(a.Customer)
	} else {
		params.CustomerEmail = stripe.String(a.Email)
	}
	s, err := p.billing.sc.V1CheckoutSessions.Create(r.Context(), params)
	if err != nil {
		p.providerFailed(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"url": s.URL})
}

func (p *Portal) handleBillingPortal(w http.ResponseWriter, r *http.Request, a account) {
	var q emptyRequest
	if !decode(w, r, &q) || p.noBilling(w) {
		return
	}
	if a.Customer == "" {
		httpjson.WriteError(w, http.StatusConflict, "no billing account yet: upgrade to the team plan first")
		return
	}
	s, err := p.billing.sc.V1BillingPortalSessions.Create(r.Context(), &stripe.BillingPortalSessionCreateParams{
		Customer: stripe.String(a.Customer), ReturnURL: stripe.String(p.portalURL + "/"),
	})
	if err != nil {
		p.providerFailed(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"url": s.URL})
}

func (p *Portal) providerFailed(w http.ResponseWriter, r *http.Request, err error) {
	p.log.Warn("payment provider request failed", "path", r.URL.Path, "err", err)
	httpjson.WriteError(w, http.StatusServiceUnavailable, "the payment provider did not answer; try again shortly")
}

// handleWebhook takes the provider's events. The signature (Stripe-Signature,
// over the body and a timestamp at most five minutes old, and at most five minutes
// ahead of this host's clock) is the credential: a bad, stale or future one gets
// 400 and changes nothing.
func (p *Portal) handleWebhook(w http.ResponseWriter, r *http.Request) {
	if p.noBilling(w) {
		return
	}
	sig := r.Header.Get("Stripe-Signature")
	if sig == "" {
		httpjson.WriteError(w, http.StatusBadRequest, "no Stripe-Signature header")
		return
	}
	body, ok := readBody(w, r, MaxWebhookBody)
	if !ok {
		return
	}
	ev, err := webhook.ConstructEventWithOptions(body, sig, p.billing.cfg.WebhookSecret, webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err == nil {
		err = notFromTheFuture(sig, time.Now())
	}
	if err != nil {
		p.log.Warn("billing webhook refused", "addr", httplimits.ClientAddr(r, p.cfg.TrustProxy), "err", err)
		httpjson.WriteError(w, http.StatusBadRequest, "webhook signature: "+err.Error())
		return
	}
	if err := p.billingEvent(r.Context(), ev); err != nil {
		var se *statusError
		if errors.As(err, &se) {
			httpjson.WriteError(w, se.status, err.Error())
			return
		}
		p.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"received": true})
}

// notFromTheFuture refuses a signature whose timestamp (t=) is more than the
// provider's tolerance ahead of now: the provider's library refuses only stale ones,
// and a delivery signed "in the future" would stay replayable for as long.
func notFromTheFuture(sig string, now time.Time) error {
	for part := range strings.SplitSeq(sig, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		if k != "t" {
			continue
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("timestamp %q is not a number", v)
		}
		if ahead := time.Unix(sec, 0).Sub(now); ahead > webhook.DefaultTolerance {
			return fmt.Errorf("timestamp is %s in the future, beyond the tolerance of %s; check the clock of this host", ahead.Round(time.Second), webhook.DefaultTolerance)
		}
	}
	return nil
}

// billingEvent applies the checkout events: a completed session upgrades the tenant
// only when it is paid; a session paid later (a bank debit) upgrades on
// async_payment_succeeded; async_payment_failed records the failure. Other events
// are acknowledged and ignored.
func (p *Portal) billingEvent(ctx context.Context, ev stripe.Event) error {
	switch ev.Type {
	case stripe.EventTypeCheckoutSessionCompleted, stripe.EventTypeCheckoutSessionAsyncPaymentSucceeded, stripe.EventTypeCheckoutSessionAsyncPaymentFailed:
	default:
		return nil
	}
	var cs stripe.CheckoutSession
	if ev.Data == nil || json.Unmarshal(ev.Data.Raw, &cs) != nil {
		return &statusError{http.StatusBadRequest, fmt.Errorf("%s without a checkout session", ev.Type)}
	}
	paid := cs.PaymentStatus == stripe.CheckoutSessionPaymentStatusPaid
	status := "active"
	switch {
	case ev.Type == stripe.EventTypeCheckoutSessionAsyncPaymentFailed:
		status = "payment_failed"
	case !paid:
		// Completed but not paid (a bank debit still under way): the upgrade waits
		// for async_payment_succeeded.
		status = "payment_pending"
	}
	return p.checkoutEvent(ctx, ev, &cs, status)
}

// checkoutEvent records a checkout event for its tenant, once per event: the event id
// is recorded in the transaction that applies it, so a redelivery (even a concurrent
// one, which waits on the row) finds it and changes nothing, and a failure rolls the
// record back so that the provider's retry applies it. Status "active" moves the
// tenant from free to team; another status is recorded only on an account that is
// not active already.
func (p *Portal) checkoutEvent(ctx context.Context, ev stripe.Event, cs *stripe.CheckoutSession, status string) error {
	tenant := cs.ClientReferenceID
	if tenant == "" {
		tenant = cs.Metadata["tenant"]
	}
	customer := ""
	if cs.Customer != nil {
		customer = cs.Customer.ID
	}
	tx, err := p.cfg.Store.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	var email string
	err = tx.QueryRow(ctx, `SELECT email FROM portal_accounts WHERE tenant_id = $1 FOR UPDATE`, tenant).Scan(&email)
	if errors.Is(err, pgx.ErrNoRows) {
		p.log.Warn("billing webhook: checkout for a tenant without a portal account", "event", ev.ID, "tenant", tenant)
		return nil
	}
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO portal_billing_events (event_id, tenant_id, kind) VALUES ($1, $2, $3) ON CONFLICT (event_id) DO NOTHING`, ev.ID, tenant, string(ev.Type))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // a redelivery
	}
	if status != "active" {
		p.log.Warn("billing: checkout not paid; the plan is unchanged", "tenant", tenant, "event", ev.ID, "type", string(ev.Type), "paymentStatus", string(cs.PaymentStatus))
		if _, err := tx.Exec(ctx, `UPDATE portal_accounts SET billing_status = $2 WHERE email = $1 AND billing_status IS DISTINCT FROM 'active'`, email, status); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, `UPDATE portal_accounts SET billing_status = 'active', billing_customer = COALESCE(NULLIF($2, ''), billing_customer) WHERE email = $1`, email, customer); err != nil {
		return err
	}
	if err := p.cfg.View.CatchUp(ctx, p.cfg.JS, tenant); err != nil {
		return err
	}
	if t, ok := p.cfg.View.Tenant(tenant); ok && t.Plan == tenancy.PlanFree {
		if _, err := p.cfg.Admin.SetPlan(ctx, "billing:"+ev.ID, tenant, tenancy.PlanTeam); err != nil {
			return err
		}
		p.log.Info("billing: tenant moved to team", "tenant", tenant, "event", ev.ID)
	}
	return tx.Commit(ctx)
}
