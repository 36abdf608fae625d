package b2b_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := ctx(t)
	e.tenants(t, "acme", "beta")
	p, err := e.reg.Add(c, b2b.Partner{Tenant: "acme", Name: "shop-1", URL: "https://shop.example/hook", Secret: b2b.Secret(testSecret), Enabled: true, Ops: []events.Op{events.OpUpsert}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Timeout != b2b.TimeoutDefault || p.MaxRequestBytes != b2b.MaxRequestBytesDefault || p.Signing != b2b.SigningStandard || p.Secret != nil || !p.SecretSet || p.SecretEncrypted {
		t.Fatalf("Add = %+v", p)
	}
	if _, err := e.reg.Add(c, b2b.Partner{Tenant: "acme", Name: "shop-1", URL: "https://x.example", Secret: b2b.Secret(testSecret)}); !errors.Is(err, b2b.ErrPartnerExists) {
		t.Fatalf("second Add = %v, want ErrPartnerExists", err)
	}
	if _, err := e.reg.Add(c, b2b.Partner{Tenant: "nobody", Name: "shop-1", URL: "https://x.example", Secret: b2b.Secret(testSecret)}); !errors.Is(err, b2b.ErrUnknownTenant) {
		t.Fatalf("Add for an unknown tenant = %v, want ErrUnknownTenant", err)
	}
	if _, err := e.reg.Add(c, b2b.Partner{Tenant: "beta", Name: "shop-1", URL: "https://beta.example/h", Secret: b2b.Secret("beta-secret-0123456789"), Signing: b2b.SigningFairway, Timeout: time.Second, MaxRequestBytes: 4096}); err != nil {
		t.Fatal(err)
	}
	got, err := e.reg.Get(c, "acme", "shop-1")
	if err != nil || string(got.Secret) != testSecret || len(got.Ops) != 1 || got.Ops[0] != events.OpUpsert || !got.Enabled {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	all, err := e.reg.List(c, "")
	if err != nil || len(all) != 2 || all[0].Tenant != "acme" || all[1].Tenant != "beta" {
		t.Fatalf("List = %v, %v", all, err)
	}
	for _, p := range all {
		if p.Secret != nil || !p.SecretSet {
			t.Fatalf("List returned a secret or lost SecretSet: %v", p)
		}
	}
	if l, _ := e.reg.List(c, "beta"); len(l) != 1 || l[0].Timeout != time.Second || l[0].MaxRequestBytes != 4096 || l[0].Enabled || l[0].Signing != b2b.SigningFairway {
		t.Fatalf("List(beta) = %v", l)
	}
	url, tmo, all2 := "https://new.example/hook", 3*time.Second, []events.Op(nil)
	up, err := e.reg.Update(c, "acme", "shop-1", b2b.Update{URL: &url, Timeout: &tmo, Ops: &all2, Secret: b2b.Secret("rotated-secret-0123456789")})
	if err != nil || up.URL != url || up.Timeout != tmo || up.Ops != nil {
		t.Fatalf("Update = %v, %v", up, err)
	}
	if got, _ := e.reg.Get(c, "acme", "shop-1"); string(got.Secret) != "rotated-secret-0123456789" {
		t.Fatal("Update did not rotate the secret")
	}
	// A fairway secret of 22 bytes is too short for Standard Webhooks: the
	// switch is refused and nothing changes.
	standard, fairway := b2b.SigningStandard, b2b.SigningFairway
	if _, err := e.reg.Update(c, "beta", "shop-1", b2b.Update{Signing: &standard}); !errors.Is(err, b2b.ErrInvalidPartner) {
		t.Fatalf("Update beta to standard signing = %v, want ErrInvalidPartner (short secret)", err)
	}
	if up, err := e.reg.Update(c, "acme", "shop-1", b2b.Update{Signing: &fairway}); err != nil || up.Signing != fairway {
		t.Fatalf("Update to fairway signing = %v, %v", up, err)
	}
	if got, _ := e.reg.Get(c, "acme", "shop-1"); got.Signing != fairway || string(got.Secret) != "rotated-secret-0123456789" {
		t.Fatalf("after Update to fairway signing: %v", got)
	}
	bad := b2b.Signing("svix")
	if _, err := e.reg.Update(c, "acme", "shop-1", b2b.Update{Signing: &bad}); !errors.Is(err, b2b.ErrInvalidPartner) {
		t.Fatalf("Update to signing svix = %v, want ErrInvalidPartner", err)
	}
	if names, err := e.reg.Partners(c, "acme"); err != nil || len(names) != 1 || names[0] != "shop-1" {
		t.Fatalf("Partners(acme) = %v, %v", names, err)
	}
	if names, err := e.reg.Partners(c, "beta"); err != nil || len(names) != 0 {
		t.Fatalf("Partners(beta) = %v, %v; want none (disabled)", names, err)
	}
	if err := e.reg.SetEnabled(c, "acme", "shop-1", false); err != nil {
		t.Fatal(err)
	}
	if names, _ := e.reg.Partners(c, "acme"); len(names) != 0 {
		t.Fatalf("Partners(acme) after disable = %v", names)
	}
	if got, _ := e.reg.Get(c, "acme", "shop-1"); got.Enabled {
		t.Fatal("SetEnabled(false) did not disable")
	}
	if err := e.reg.Remove(c, "acme", "shop-1"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		e.reg.Remove(c, "acme", "shop-1"),
		e.reg.SetEnabled(c, "acme", "shop-1", true),
		func() error { _, err := e.reg.Get(c, "acme", "shop-1"); return err }(),
		func() error { _, err := e.reg.Update(c, "acme", "shop-1", b2b.Update{}); return err }(),
	} {
		if !errors.Is(err, b2b.ErrUnknownPartner) {
			t.Errorf("after Remove: %v, want ErrUnknownPartner", err)
		}
	}
	// Removing the tenant removes its partners.
	if _, err := e.pool.Exec(c, `DELETE FROM fairway.tenants WHERE id = 'beta'`); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.reg.List(c, ""); len(l) != 0 {
		t.Fatalf("List after deleting the tenant = %v", l)
	}
}

func TestRegistryValidation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.tenants(t, "acme")
	strict, err := b2b.NewRegistry(e.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := b2b.Partner{Tenant: "acme", Name: "p1", URL: "https://partner.example/hook", Secret: b2b.Secret(testSecret)}
	for _, tc := range []struct {
		name string
		edit func(p *b2b.Partner)
	}{
		{"UpperName", func(p *b2b.Partner) { p.Name = "P1" }},
		{"DotName", func(p *b2b.Partner) { p.Name = "a.b" }},
		{"EmptyName", func(p *b2b.Partner) { p.Name = "" }},
		{"LongName", func(p *b2b.Partner) { p.Name = strings.Repeat("a", 64) }},
		{"BadTenant", func(p *b2b.Partner) { p.Tenant = "Acme" }},
		{"HTTP", func(p *b2b.Partner) { p.URL = "http://partner.example/hook" }},
		{"FTP", func(p *b2b.Partner) { p.URL = "ftp://partner.example/hook" }},
		{"NoHost", func(p *b2b.Partner) { p.URL = "https:///hook" }},
		{"Relative", func(p *b2b.Partner) { p.URL = "/hook" }},
		{"ShortSecret", func(p *b2b.Partner) { p.Secret = b2b.Secret("short") }},
		{"ShortFairwaySecret", func(p *b2b.Partner) { p.Signing, p.Secret = b2b.SigningFairway, b2b.Secret("fifteen-bytes!!") }},
		{"ShortStandardSecret", func(p *b2b.Partner) { p.Secret = b2b.Secret("twenty-three-bytes-long") }},
		{"UnknownSigning", func(p *b2b.Partner) { p.Signing = "svix" }},
		{"TimeoutLow", func(p *b2b.Partner) { p.Timeout = time.Millisecond }},
		{"TimeoutHigh", func(p *b2b.Partner) { p.Timeout = time.Hour }},
		{"MaxLow", func(p *b2b.Partner) { p.MaxRequestBytes = 10 }},
		{"MaxHigh", func(p *b2b.Partner) { p.MaxRequestBytes = 1 << 30 }},
		{"EmptyOps", func(p *b2b.Partner) { p.Ops = []events.Op{} }},
		{"BadOp", func(p *b2b.Partner) { p.Ops = []events.Op{"merge"} }},
	} {
		p := ok
		tc.edit(&p)
		_, err := strict.Add(ctx(t), p)
		if !errors.Is(err, b2b.ErrInvalidPartner) {
			t.Errorf("%s: Add = %v, want ErrInvalidPartner", tc.name, err)
		} else if strings.Contains(err.Error(), testSecret) {
			t.Errorf("%s: error shows the secret: %v", tc.name, err)
		}
	}
	if _, err := strict.Add(ctx(t), ok); err != nil {
		t.Fatalf("valid partner: %v", err)
	}
	// A fairway secret may be shorter than a standard one.
	fw := ok
	fw.Name, fw.Signing, fw.Secret = "p-fairway", b2b.SigningFairway, b2b.Secret("sixteen-bytes!!!")
	if _, err := strict.Add(ctx(t), fw); err != nil {
		t.Fatalf("16-byte secret, fairway signing: %v", err)
	}
	// With AllowInsecureHTTP, http is fine.
	ok.Name, ok.URL = "p2", "http://127.0.0.1:8080/hook"
	if _, err := e.reg.Add(ctx(t), ok); err != nil {
		t.Fatalf("http with AllowInsecureHTTP: %v", err)
	}
}

func TestSecretEncryptionAtRest(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.tenants(t, "acme")
	enc := e.encrypted(t)
	p, err := enc.Add(ctx(t), b2b.Partner{Tenant: "acme", Name: "p1", URL: "https://x.example", Secret: b2b.Secret(testSecret)})
	if err != nil || !p.SecretEncrypted {
		t.Fatalf("Add = %v, %v; want SecretEncrypted", p, err)
	}
	var raw []byte
	if err := e.pool.QueryRow(ctx(t), `SELECT secret FROM fairway.partners WHERE partner = 'p1'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(testSecret)) {
		t.Fatal("the secret is stored in clear with a key set")
	}
	if got, err := enc.Get(ctx(t), "acme", "p1"); err != nil || string(got.Secret) != testSecret {
		t.Fatalf("Get with the key = %v, %v", got, err)
	}
	// Without the key, or with another, the secret is unreadable; List
	// still works (it never reads secrets).
	other := make([]byte, 32)
	for _, k := range [][]byte{nil, other} {
		r, err := b2b.NewRegistry(e.pool, &b2b.RegistryConfig{SecretKey: k})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(ctx(t), "acme", "p1"); !errors.Is(err, b2b.ErrSecretKey) {
			t.Fatalf("Get with key %x = %v, want ErrSecretKey", k, err)
		}
		if l, err := r.List(ctx(t), "acme"); err != nil || len(l) != 1 || !l[0].SecretEncrypted {
			t.Fatalf("List = %v, %v", l, err)
		}
	}
	// A row copied to another partner does not decrypt (bound to its key).
	if _, err := e.pool.Exec(ctx(t), `INSERT INTO fairway.partners (tenant_id, partner, url, secret, timeout_ms, max_request_bytes, signing)
		SELECT tenant_id, 'p2', url, secret, timeout_ms, max_request_bytes, signing FROM fairway.partners WHERE partner = 'p1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Get(ctx(t), "acme", "p2"); !errors.Is(err, b2b.ErrSecretKey) {
		t.Fatalf("Get of a copied row = %v, want ErrSecretKey", err)
	}
	// Secrets stored before the key was set still read, in clear.
	plain, _ := b2b.NewRegistry(e.pool, &b2b.RegistryConfig{})
	if _, err := plain.Add(ctx(t), b2b.Partner{Tenant: "acme", Name: "p3", URL: "https://x.example", Secret: b2b.Secret(testSecret)}); err != nil {
		t.Fatal(err)
	}
	if got, err := enc.Get(ctx(t), "acme", "p3"); err != nil || string(got.Secret) != testSecret || got.SecretEncrypted {
		t.Fatalf("Get of a clear secret with a key = %v, %v", got, err)
	}
}

func TestParseSecretKey(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	for _, s := range []string{hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key), " " + hex.EncodeToString(key) + "\n"} {
		got, err := b2b.ParseSecretKey(s)
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("ParseSecretKey(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "short", hex.EncodeToString(key[:16]), base64.StdEncoding.EncodeToString(key[:24])} {
		if _, err := b2b.ParseSecretKey(s); !errors.Is(err, b2b.ErrConfig) {
			t.Errorf("ParseSecretKey(%q) = %v, want ErrConfig", s, err)
		} else if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error shows the key: %v", err)
		}
	}
	if _, err := b2b.NewRegistry(nil, nil); !errors.Is(err, b2b.ErrConfig) {
		t.Errorf("NewRegistry(nil) = %v", err)
	}
}

func TestRotateSecret(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.tenants(t, "acme")
	enc := e.encrypted(t)
	c := ctx(t)
	first, second, third := b2b.GenerateSecret(), b2b.GenerateSecret(), b2b.GenerateSecret()
	if _, err := enc.Add(c, b2b.Partner{Tenant: "acme", Name: "p1", URL: "https://x.example", Secret: first}); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	p, err := enc.RotateSecret(c, "acme", "p1", second, until)
	if err != nil || p.Secret != nil || p.PreviousSecret != nil || !p.PreviousSecretUntil.Equal(until) {
		t.Fatalf("RotateSecret = %v, %v; want no secrets and until %s", p, err, until)
	}
	got, err := enc.Get(c, "acme", "p1")
	if err != nil || !bytes.Equal(got.Secret, second) || !bytes.Equal(got.PreviousSecret, first) || !got.PreviousSecretUntil.Equal(until) {
		t.Fatalf("Get after RotateSecret = %v, %v; want the new secret, the old one as previous", got, err)
	}
	var raw []byte
	if err := e.pool.QueryRow(c, `SELECT previous_secret FROM fairway.partners WHERE partner = 'p1'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, first) {
		t.Fatal("the previous secret is stored in clear with a key set")
	}
	if l, err := enc.List(c, "acme"); err != nil || l[0].PreviousSecret != nil || !l[0].PreviousSecretUntil.Equal(until) {
		t.Fatalf("List = %v, %v; want the overlap without the secret", l, err)
	}
	// A rotation without overlap drops the previous secret at once.
	if _, err := enc.RotateSecret(c, "acme", "p1", third, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, err := enc.Get(c, "acme", "p1"); err != nil || !bytes.Equal(got.Secret, third) || got.PreviousSecret != nil || !got.PreviousSecretUntil.IsZero() {
		t.Fatalf("Get after RotateSecret without overlap = %v, %v", got, err)
	}
	// A secret the scheme refuses changes nothing.
	if _, err := enc.RotateSecret(c, "acme", "p1", b2b.Secret("too-short"), until); !errors.Is(err, b2b.ErrInvalidPartner) {
		t.Fatalf("RotateSecret to a short secret = %v, want ErrInvalidPartner", err)
	}
	if _, err := enc.RotateSecret(c, "acme", "nope", second, until); !errors.Is(err, b2b.ErrUnknownPartner) {
		t.Fatalf("RotateSecret of an unknown partner = %v, want ErrUnknownPartner", err)
	}
	if got, _ := enc.Get(c, "acme", "p1"); !bytes.Equal(got.Secret, third) || got.PreviousSecret != nil {
		t.Fatalf("a refused rotation changed the partner: %v", got)
	}
}
