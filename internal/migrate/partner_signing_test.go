package migrate_test

import (
	"context"
	"testing"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

// Migration 00014 gives partners a signing scheme: those that exist keep
// fairway's own, which they verify today, with their secret as it was;
// partners added afterwards get the default, Standard Webhooks.
func TestExistingPartnersKeepFairwaySigning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secret = "a-raw-secret-of-an-existing-partner"
	// The row as the registry wrote it before 00014: secret is 0x00 || secret.
	pool := migratedWith(t, 13, `INSERT INTO fairway.tenants (id) VALUES ('acme');
		INSERT INTO fairway.partners (tenant_id, partner, url, secret, timeout_ms, max_request_bytes)
		VALUES ('acme', 'erp', 'https://erp.example/hook', '\x00'::bytea || convert_to('`+secret+`', 'UTF8'), 10000, 1048576)`)
	reg, err := b2b.NewRegistry(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := reg.Get(ctx, "acme", "erp")
	if err != nil || got.Signing != b2b.SigningFairway || string(got.Secret) != secret || got.PreviousSecret != nil || !got.PreviousSecretUntil.IsZero() {
		t.Fatalf("existing partner after migrating = %v, %v; want fairway signing and its secret", got, err)
	}
	added, err := reg.Add(ctx, b2b.Partner{Tenant: "acme", Name: "shop", URL: "https://shop.example/hook", Secret: b2b.GenerateSecret()})
	if err != nil || added.Signing != b2b.SigningStandard {
		t.Fatalf("partner added after migrating = %v, %v; want standard signing", added, err)
	}
}
