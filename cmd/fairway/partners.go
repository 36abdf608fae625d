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
slots and backlog. Secrets are encrypted at rest with AES-256-GCM when
` + b2b.SecretKeyEnv + ` holds a 32-byte key (64 hex digits or base64, e.g.
"openssl rand -base64 32"); without it they are stored as given. Secrets are
never printed.`,
	}
	cmd.AddCommand(c.partnersAddCmd(), c.partnersListCmd(), c.partnersRemoveCmd(),
		c.partnersEnableCmd("enable", true), c.partnersEnableCmd("disable", false))
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
	url, secret, secretEnv, ops string
	timeout                     time.Duration
	maxBytes                    int
	disabled, allowHTTP         bool
}

func (f *partnerFlags) secretValue(getenv func(string) string) ([]byte, error) {
	switch {
	case f.secret != "" && f.secretEnv != "":
		return nil, usageError{errors.New("give --secret or --secret-env, not both")}
	case f.secretEnv != "":
		v := getenv(f.secretEnv)
		if v == "" {
			return nil, usageError{fmt.Errorf("--secret-env %s: the variable is empty or unset", f.secretEnv)}
		}
		return []byte(v), nil
	case f.secret != "":
		return []byte(f.secret), nil
	}
	return nil, usageError{errors.New("--secret-env NAME (preferred: keeps the secret out of shell history) or --secret is required")}
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
		Use:   "add <tenant-id> <partner> --url <https-url> --secret-env <NAME>",
		Short: "Register a partner webhook for a tenant (the tenant is created if new)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.url == "" {
				return usageError{errors.New("--url is required")}
			}
			secret, err := f.secretValue(c.getenv)
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
				Tenant: args[0], Name: args[1], URL: f.url, Secret: secret, Enabled: !f.disabled,
				Timeout: f.timeout, MaxRequestBytes: f.maxBytes, Ops: ops,
			})
			if err != nil {
				return err
			}
			if f.secret != "" {
				fmt.Fprintln(c.errOut, "note: --secret puts the secret in your shell history; prefer --secret-env")
			}
			if !p.SecretEncrypted {
				fmt.Fprintf(c.errOut, "note: %s is not set; the secret is stored unencrypted\n", b2b.SecretKeyEnv)
			}
			fmt.Fprintf(c.out, "added %s %s → %s (enabled %v, timeout %s, max request %d bytes, ops %s)\n",
				p.Tenant, p.Dest(), p.RedactedURL(), p.Enabled, p.Timeout, p.MaxRequestBytes, opsText(p.Ops))
			return nil
		},
	}
	cmd.Flags().StringVar(&f.url, "url", "", "endpoint receiving the POSTs (https)")
	cmd.Flags().StringVar(&f.secret, "secret", "", "signing secret (lands in shell history; prefer --secret-env)")
	cmd.Flags().StringVar(&f.secretEnv, "secret-env", "", "read the signing secret from this environment variable")
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
			fmt.Fprintln(w, "TENANT\tPARTNER\tURL\tENABLED\tTIMEOUT\tMAX BYTES\tOPS\tSECRET")
			for _, p := range ps {
				secret := "unset"
				switch {
				case p.SecretEncrypted:
					secret = "set (encrypted)"
				case p.SecretSet:
					secret = "set"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%d\t%s\t%s\n", p.Tenant, p.Name, p.RedactedURL(), p.Enabled, p.Timeout, p.MaxRequestBytes, opsText(p.Ops), secret)
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
