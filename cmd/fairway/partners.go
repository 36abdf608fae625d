package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

func (c *cli) partnersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partners",
		Short: "Register a tenant's B2B partner webhooks (destination b2b:<partner>)",
		Long: `Each partner of a tenant is its own destination b2b:<partner>, with its own
slots and backlog. Requests are signed with Standard Webhooks (--signing
standard, the default; secrets in its whsec_<base64> form) or with fairway's
own scheme (--signing fairway); docs/partners.md says what a partner
receives and how it verifies it. Secrets are encrypted at rest with
AES-256-GCM when ` + b2b.SecretKeyEnv + ` holds a 32-byte key (64 hex digits or
base64, e.g. "openssl rand -base64 32"); without it they are stored as
given. A secret is printed only when fairway generates it
(--generate-secret), once.`,
	}
	cmd.AddCommand(c.partnersAddCmd(), c.partnersListCmd(), c.partnersRemoveCmd(),
		c.partnersEnableCmd("enable", true), c.partnersEnableCmd("disable", false),
		c.partnersSetSigningCmd(), c.partnersRotateSecretCmd(),
		c.partnersSetTransformCmd(), c.partnersSetBatchCmd(), c.partnersSetRateCmd(), c.partnersDeliveriesCmd())
	c.addFlags(cmd.PersistentFlags(), usesDatabase|usesLog)
	return cmd
}

// registry opens PostgreSQL (migrating it) and a partner registry on it.
func (c *cli) registry(ctx context.Context, allowHTTP bool) (*b2b.Registry, *tenancy.Store, func(), error) {
	var key []byte
	if v := c.getenv(b2b.SecretKeyEnv); v != "" {
		k, err := b2b.ParseSecretKey(v)
		if err != nil {
			return nil, nil, nil, usageError{err}
		}
		key = k
	}
	st, pool, err := c.store(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{SecretKey: key, AllowInsecureHTTP: allowHTTP})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return reg, st, pool.Close, nil
}

// partnerFlags are the settings add takes.
type partnerFlags struct {
	url, ops, signing   string
	secret              secretFlags
	timeout             time.Duration
	maxBytes            int
	disabled, allowHTTP bool
}

// secretFlags are the ways add and rotate-secret take a secret.
type secretFlags struct {
	secret, secretEnv string
	generate          bool
}

func (f *secretFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.secret, "secret", "", "signing secret (lands in shell history; prefer --secret-env)")
	cmd.Flags().StringVar(&f.secretEnv, "secret-env", "", "read the signing secret from this environment variable (standard signing: whsec_<base64>)")
	cmd.Flags().BoolVar(&f.generate, "generate-secret", false, "generate a whsec_ secret (standard signing) and print it, once")
}

// value returns the secret given in the form signing shares it, and
// whether fairway generated it.
func (f *secretFlags) value(signing b2b.Signing, getenv func(string) string) (b2b.Secret, bool, error) {
	given := 0
	for _, set := range []bool{f.secret != "", f.secretEnv != "", f.generate} {
		if set {
			given++
		}
	}
	if given > 1 {
		return nil, false, usageError{errors.New("give one of --secret-env, --secret, --generate-secret")}
	}
	var text string
	switch {
	case f.generate && signing == b2b.SigningFairway:
		return nil, false, usageError{errors.New("--generate-secret makes whsec_ secrets for standard signing; give a fairway-signed partner its secret with --secret-env")}
	case f.generate:
		return b2b.GenerateSecret(), true, nil
	case f.secretEnv != "":
		if text = getenv(f.secretEnv); text == "" {
			return nil, false, usageError{fmt.Errorf("--secret-env %s: the variable is empty or unset", f.secretEnv)}
		}
	case f.secret != "":
		text = f.secret
	default:
		return nil, false, usageError{errors.New("--secret-env NAME (preferred: keeps the secret out of shell history), --generate-secret or --secret is required")}
	}
	secret, err := signing.ParseSecret(text)
	if err != nil {
		return nil, false, usageError{err}
	}
	return secret, false, nil
}

// printSecret shows a secret fairway generated, the one time it is shown.
func (c *cli) printSecret(f *secretFlags, generated bool, secret b2b.Secret) {
	switch {
	case generated:
		fmt.Fprintf(c.out, "secret %s\n", b2b.WebhookSecret(secret))
		fmt.Fprintln(c.errOut, "note: the generated secret is shown this once; give it to the partner for its verifier")
	case f.secret != "":
		fmt.Fprintln(c.errOut, "note: --secret puts the secret in your shell history; prefer --secret-env")
	}
}

func parseOps(s string) ([]events.Op, error) {
	if s == "" || s == "all" {
		return nil, nil
	}
	var ops []events.Op
	for o := range strings.SplitSeq(s, ",") {
		op := events.Op(strings.TrimSpace(o))
		if !op.Valid() {
			return nil, usageError{fmt.Errorf("--ops: %q is not one of upsert, delete", op)}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func (c *cli) partnersAddCmd() *cobra.Command {
	var f partnerFlags
	cmd := &cobra.Command{
		Use:   "add <tenant-id> <partner> --url <https-url> (--secret-env <NAME> | --generate-secret)",
		Short: "Register a partner webhook for a tenant (the tenant is created if new)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.url == "" {
				return usageError{errors.New("--url is required")}
			}
			signing, err := b2b.ParseSigning(f.signing)
			if err != nil {
				return usageError{fmt.Errorf("--signing: %w", err)}
			}
			secret, generated, err := f.secret.value(signing, c.getenv)
			if err != nil {
				return err
			}
			ops, err := parseOps(f.ops)
			if err != nil {
				return err
			}
			reg, st, done, err := c.registry(cmd.Context(), f.allowHTTP)
			if err != nil {
				return err
			}
			defer done()
			if _, err := st.EnsureTenant(cmd.Context(), args[0]); err != nil {
				return err
			}
			p, err := reg.Add(cmd.Context(), b2b.Partner{
				Tenant: args[0], Name: args[1], URL: f.url, Signing: signing, Secret: secret, Enabled: !f.disabled,
				Timeout: f.timeout, MaxRequestBytes: f.maxBytes, Ops: ops,
			})
			if err != nil {
				return err
			}
			if !p.SecretEncrypted {
				fmt.Fprintf(c.errOut, "note: %s is not set; the secret is stored unencrypted\n", b2b.SecretKeyEnv)
			}
			fmt.Fprintf(c.out, "added %s %s → %s (signing %s, enabled %v, timeout %s, max request %d bytes, ops %s)\n",
				p.Tenant, p.Dest(), p.RedactedURL(), p.Signing, p.Enabled, p.Timeout, p.MaxRequestBytes, opsText(p.Ops))
			c.printSecret(&f.secret, generated, secret)
			return nil
		},
	}
	cmd.Flags().StringVar(&f.url, "url", "", "endpoint receiving the POSTs (https)")
	f.secret.register(cmd)
	cmd.Flags().StringVar(&f.signing, "signing", string(b2b.SigningDefault), "how requests are signed: standard (Standard Webhooks) or fairway (X-Fairway-Signature)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", b2b.TimeoutDefault, "request timeout")
	cmd.Flags().IntVar(&f.maxBytes, "max-request-bytes", b2b.MaxRequestBytesDefault, "largest request body; batches are split to fit")
	cmd.Flags().StringVar(&f.ops, "ops", "all", "ops to send: all, or a comma-separated list of upsert, delete")
	cmd.Flags().BoolVar(&f.disabled, "disabled", false, "register disabled (nothing is sent until enabled)")
	cmd.Flags().BoolVar(&f.allowHTTP, "allow-insecure-http", false, "accept an http:// URL (local testing only)")
	return cmd
}

func opsText(ops []events.Op) string {
	if ops == nil {
		return "all"
	}
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = string(o)
	}
	return strings.Join(s, ",")
}

func (c *cli) partnersListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list [tenant-id]",
		Short: "List partners (secrets are never shown, only whether one is set)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			tenant := ""
			if len(args) == 1 {
				tenant = args[0]
			}
			ps, err := reg.List(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TENANT\tPARTNER\tURL\tENABLED\tTIMEOUT\tMAX BYTES\tMAX EVENTS\tOPS\tTRANSFORM\tSIGNING\tSECRET")
			now := time.Now()
			for _, p := range ps {
				secret := "unset"
				switch {
				case p.SecretEncrypted:
					secret = "set (encrypted)"
				case p.SecretSet:
					secret = "set"
				}
				if now.Before(p.PreviousSecretUntil) {
					secret += ", previous signs until " + p.PreviousSecretUntil.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Tenant, p.Name, p.RedactedURL(), p.Enabled, p.Timeout, p.MaxRequestBytes,
					maxEventsText(p.MaxEvents), opsText(p.Ops), p.Transform.Kind(), p.Signing, secret)
			}
			return w.Flush()
		},
	}
}

func (c *cli) partnersRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove <tenant-id> <partner>",
		Short: "Remove a partner (its undelivered backlog stays in the stream)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			if err := reg.Remove(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "removed %s b2b:%s\n", args[0], args[1])
			return nil
		},
	}
}

func (c *cli) partnersEnableCmd(verb string, enabled bool) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " <tenant-id> <partner>",
		Short: map[bool]string{true: "Resume deliveries to a partner", false: "Pause deliveries to a partner (batches wait, nothing is dropped)"}[enabled],
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			if err := reg.SetEnabled(cmd.Context(), args[0], args[1], enabled); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%sd %s b2b:%s\n", verb, args[0], args[1])
			return nil
		},
	}
}

func (c *cli) partnersSetSigningCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set-signing <tenant-id> <partner> standard|fairway",
		Short: "Change how a partner's requests are signed; the secret stays",
		Long: `Changes the scheme of every request from the next one on (sinks read
partner settings every few seconds). The secret stays: a partner moving to
standard gives its Standard Webhooks verifier whsec_ followed by the
base64 of the secret it has (printf %s "$SECRET" | base64), or takes a new
one with rotate-secret --generate-secret afterwards. Standard signing needs
a secret of at least 24 bytes. The partner's endpoint should accept both
schemes while the change is made: a request it refuses with 401 is
dead-lettered. docs/partners.md walks through the move.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			signing, err := b2b.ParseSigning(args[2])
			if err != nil {
				return usageError{err}
			}
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			p, err := reg.Update(cmd.Context(), args[0], args[1], b2b.Update{Signing: &signing})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s %s signs with %s\n", p.Tenant, p.Dest(), p.Signing)
			return nil
		},
	}
}

func (c *cli) partnersRotateSecretCmd() *cobra.Command {
	var (
		f       secretFlags
		overlap time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rotate-secret <tenant-id> <partner> (--secret-env <NAME> | --generate-secret)",
		Short: "Give a partner a new signing secret; the old one keeps signing too for --overlap",
		Long: `Every request carries a signature under the new secret and, until --overlap
has passed, one under the old secret as well, so that the partner can move
its verifier to the new secret without refusing a request. --overlap 0
drops the old secret at once.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if overlap < 0 {
				return usageError{fmt.Errorf("--overlap %s is negative", overlap)}
			}
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			// Get reads the partner's scheme, which says how the secret is
			// written, and fails when the stored secrets are encrypted and
			// FAIRWAY_SECRET_KEY is missing.
			old, err := reg.Get(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			secret, generated, err := f.value(old.Signing, c.getenv)
			if err != nil {
				return err
			}
			var until time.Time
			if overlap > 0 {
				until = time.Now().Add(overlap)
			}
			p, err := reg.RotateSecret(cmd.Context(), args[0], args[1], secret, until)
			if err != nil {
				return err
			}
			if until.IsZero() {
				fmt.Fprintf(c.out, "rotated the secret of %s %s; the old one no longer signs\n", p.Tenant, p.Dest())
			} else {
				fmt.Fprintf(c.out, "rotated the secret of %s %s; the old one signs too until %s\n", p.Tenant, p.Dest(), until.UTC().Format(time.RFC3339))
			}
			c.printSecret(&f, generated, secret)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&overlap, "overlap", b2b.SecretOverlapDefault, "how long the old secret signs as well")
	return cmd
}
