package portal_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/portal/portaltest"
)

// TestBillingNotConfigured: stripe and billing false, checkout and the billing
// portal 503, the webhook 503.
func TestBillingNotConfigured(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	b := newBrowser(t, e.URL)
	b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	wantBillingShown(t, b, false)
	b.must(http.StatusServiceUnavailable, "POST", "/api/checkout", `{}`)
	b.must(http.StatusServiceUnavailable, "POST", "/api/billing-portal", `{}`)
	newBrowser(t, e.URL).must(http.StatusUnauthorized, "POST", "/api/checkout", `{}`)
}

// event is a paid checkout.session.completed event for tenant.
func event(id, tenant, customer string) []byte {
	return checkoutEvent(id, "checkout.session.completed", tenant, customer, "paid")
}

// checkoutEvent is a checkout session event of type typ for tenant whose session's
// payment_status is paymentStatus.
func checkoutEvent(id, typ, tenant, customer, paymentStatus string) []byte {
	data, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "livemode": false,
		"data": map[string]any{"object": map[string]any{
			"id": "cs_test_" + id, "object": "checkout.session", "mode": "subscription", "status": "complete",
			"payment_status": paymentStatus, "client_reference_id": tenant, "customer": customer,
			"metadata": map[string]string{"tenant": tenant},
		}},
	})
	return data
}

// deliver posts payload to the webhook signed with secret at ts.
func deliver(t *testing.T, e *portaltest.Env, payload []byte, secret string, ts time.Time) (int, string) {
	t.Helper()
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: ts})
	req, _ := http.NewRequest("POST", e.URL+"/stripe/webhook", strings.NewReader(string(payload)))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", sp.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	s, _ := json.Marshal(m)
	return resp.StatusCode, string(s)
}

// planChanges counts tenant's plan.set events in the audit trail once the
// database's projection caught up with the view.
func planChanges(t *testing.T, e *portaltest.Env, tenant string) (n int, actors []string) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, 10*time.Second, func() error {
		pos, err := e.Store.Position(ctx, "admin")
		if err != nil || pos < e.Log.View().Seq() {
			return errorf("admin projection at %d, view at %d (%v)", pos, e.Log.View().Seq(), err)
		}
		return nil
	})
	evs, err := e.Store.Audit(ctx, tenant, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Action == "plan.set" {
			n++
			actors = append(actors, ev.Actor)
		}
	}
	return n, actors
}

// TestBillingCheckoutAndWebhook against stripe-mock: checkout answers a hosted
// address; a signed checkout.session.completed moves the tenant to team with actor
// billing:<event id>, once however often (and however concurrently) it is
// redelivered; then checkout is 409 and the billing portal answers an address. A
// stale signature, a wrong secret, a changed body and no signature get 400 and
// change nothing.
func TestBillingCheckoutAndWebhook(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Billing: true})
	if h := newBrowser(t, e.URL).must(http.StatusOK, "GET", "/health", ""); h["stripe"] != true {
		t.Fatalf("health %v", h)
	}
	b := newBrowser(t, e.URL)
	b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	other := newBrowser(t, e.URL)
	other.must(http.StatusOK, "POST", "/api/register", registerBody("bo@example.com", "bravo"))
	wantBillingShown(t, b, true)
	co := b.must(http.StatusOK, "POST", "/api/checkout", `{}`)
	if u, _ := co["url"].(string); !strings.HasPrefix(u, "https://") {
		t.Fatalf("checkout %v", co)
	}
	b.must(http.StatusConflict, "POST", "/api/billing-portal", `{}`) // no customer yet

	// Refused deliveries change nothing.
	for name, c := range map[string]struct {
		payload []byte
		secret  string
		at      time.Time
	}{
		"stale":        {event("evt_stale", "bravo", "cus_x"), e.WebhookSecret, time.Now().Add(-10 * time.Minute)},
		"wrong secret": {event("evt_wrong", "bravo", "cus_x"), "whsec_other", time.Now()},
	} {
		if code, body := deliver(t, e, c.payload, c.secret, c.at); code != http.StatusBadRequest || !strings.Contains(body, "error") {
			t.Fatalf("%s delivery: %d %s", name, code, body)
		}
	}
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: event("evt_body", "bravo", "cus_x"), Secret: e.WebhookSecret})
	for name, hdr := range map[string]string{"changed body": sp.Header, "no signature": ""} {
		req, _ := http.NewRequest("POST", e.URL+"/stripe/webhook", strings.NewReader(strings.Replace(string(sp.Payload), "bravo", "acme", 1)))
		if hdr != "" {
			req.Header.Set("Stripe-Signature", hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: %d", name, resp.StatusCode)
		}
	}
	if n, _ := planChanges(t, e, "bravo"); n != 0 {
		t.Fatalf("refused deliveries changed bravo's plan %d times", n)
	}
	if n, _ := planChanges(t, e, "acme"); n != 0 {
		t.Fatalf("refused deliveries changed acme's plan %d times", n)
	}

	// The delivery, then redeliveries: one after another and four at once.
	payload := event("evt_1", "acme", "cus_acme")
	if code, body := deliver(t, e, payload, e.WebhookSecret, time.Now()); code != http.StatusOK || body != `{"received":true}` {
		t.Fatalf("delivery: %d %s", code, body)
	}
	deliver(t, e, payload, e.WebhookSecret, time.Now().Add(time.Second))
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Go(func() { codes[i], _ = deliver(t, e, payload, e.WebhookSecret, time.Now()) })
	}
	wg.Wait()
	for _, c := range codes {
		if c != http.StatusOK {
			t.Fatalf("redeliveries answered %v", codes)
		}
	}
	if me := b.must(http.StatusOK, "GET", "/api/me", ""); me["plan"] != "team" || me["quota"] != 1000000.0 {
		t.Fatalf("after checkout: %v", me)
	}
	if n, actors := planChanges(t, e, "acme"); n != 1 || actors[0] != "billing:evt_1" {
		t.Fatalf("plan changes %d by %v; want one by billing:evt_1", n, actors)
	}
	if ov := b.must(http.StatusOK, "GET", "/api/overview", ""); ov["plan"] != "team" || ov["billing"].(map[string]any)["status"] != "active" {
		t.Fatalf("overview after checkout %v", ov)
	}
	// A second event for a tenant already on team changes nothing either.
	deliver(t, e, event("evt_2", "acme", "cus_acme"), e.WebhookSecret, time.Now())
	if n, _ := planChanges(t, e, "acme"); n != 1 {
		t.Fatalf("a second completed checkout changed the plan again (%d)", n)
	}
	b.must(http.StatusConflict, "POST", "/api/checkout", `{}`)
	bp := b.must(http.StatusOK, "POST", "/api/billing-portal", `{}`)
	if u, _ := bp["url"].(string); !strings.HasPrefix(u, "https://") {
		t.Fatalf("billing portal %v", bp)
	}
	if me := other.must(http.StatusOK, "GET", "/api/me", ""); me["plan"] != "free" {
		t.Fatalf("bravo %v", me)
	}
}

// TestBillingUpgradesOnlyWhenPaid: a completed checkout whose payment is not made
// (payment_status unpaid: a bank debit under way) leaves the tenant on free, as does
// the provider's async_payment_failed; async_payment_succeeded then moves it to
// team. A delivery signed with a timestamp ahead of the tolerance is refused like a
// stale one.
func TestBillingUpgradesOnlyWhenPaid(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Billing: true})
	b := newBrowser(t, e.URL)
	b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	status := func() any {
		ov := b.must(http.StatusOK, "GET", "/api/overview", "")
		if bill, ok := ov["billing"].(map[string]any); ok {
			return bill["status"]
		}
		return nil
	}
	future := checkoutEvent("evt_future", "checkout.session.completed", "acme", "cus_acme", "paid")
	if code, body := deliver(t, e, future, e.WebhookSecret, time.Now().Add(10*time.Minute)); code != http.StatusBadRequest || !strings.Contains(body, "future") {
		t.Fatalf("a delivery signed 10 minutes ahead: %d %s, want 400 naming the future", code, body)
	}
	for _, c := range []struct{ id, typ, pay, status string }{
		{"evt_unpaid", "checkout.session.completed", "unpaid", "payment_pending"},
		{"evt_failed", "checkout.session.async_payment_failed", "unpaid", "payment_failed"},
	} {
		if code, body := deliver(t, e, checkoutEvent(c.id, c.typ, "acme", "cus_acme", c.pay), e.WebhookSecret, time.Now()); code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.id, code, body)
		}
		if me := b.must(http.StatusOK, "GET", "/api/me", ""); me["plan"] != "free" {
			t.Fatalf("after %s (%s, payment %s) the plan is %v, want free", c.id, c.typ, c.pay, me["plan"])
		}
		if got := status(); got != c.status {
			t.Errorf("after %s the billing status is %v, want %s", c.id, got, c.status)
		}
	}
	if n, _ := planChanges(t, e, "acme"); n != 0 {
		t.Fatalf("unpaid checkouts changed the plan %d times", n)
	}
	paid := checkoutEvent("evt_paid", "checkout.session.async_payment_succeeded", "acme", "cus_acme", "paid")
	if code, body := deliver(t, e, paid, e.WebhookSecret, time.Now()); code != http.StatusOK {
		t.Fatalf("async_payment_succeeded: %d %s", code, body)
	}
	if me := b.must(http.StatusOK, "GET", "/api/me", ""); me["plan"] != "team" {
		t.Fatalf("after the payment succeeded: %v", me)
	}
	if n, actors := planChanges(t, e, "acme"); n != 1 || actors[0] != "billing:evt_paid" {
		t.Fatalf("plan changes %d by %v; want one by billing:evt_paid", n, actors)
	}
	if got := status(); got != "active" {
		t.Errorf("billing status %v after the payment, want active", got)
	}
}

// wantBillingShown checks what the overview and /api/me say of billing: stripe and
// billing are configured (or not), and the overview carries no billing object.
func wantBillingShown(t *testing.T, b *browser, configured bool) {
	t.Helper()
	if ov := b.must(http.StatusOK, "GET", "/api/overview", ""); ov["stripe"] != configured || ov["billing"] != nil {
		t.Fatalf("overview %v", ov)
	}
	if me := b.must(http.StatusOK, "GET", "/api/me", ""); me["billing"] != configured {
		t.Fatalf("me %v", me)
	}
}
