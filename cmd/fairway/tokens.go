package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func (c *cli) tokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "List and revoke API tokens (tenant and admin); issue them with tenants create|token and admin-token create",
	}
	cmd.AddCommand(c.tokensListCmd(), c.tokensRevokeCmd())
	c.addFlags(cmd.PersistentFlags(), usesDatabase|usesLog)
	return cmd
}

func (c *cli) tokensListCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "list [--tenant <tenant-id>]",
		Short: "List tokens, revoked ones included: id, prefix, kind, tenant or name, created, revoked (never the secret)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			ts, err := st.Tokens(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tPREFIX\tKIND\tTENANT\tNAME\tCREATED\tREVOKED")
			for _, t := range ts {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, orDash(t.Prefix), tokenKind(t), orDash(t.Tenant), orDash(t.Name),
					t.CreatedAt.UTC().Format(time.RFC3339), timeOrDash(t.RevokedAt))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's tokens (default: every tenant's and the admin tokens)")
	return cmd
}

func (c *cli) tokensRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke <id | prefix | token | ->",
		Short: "Revoke a token by the id or prefix `tokens list` shows, or by the whole token (- reads it from stdin)",
		Long: `revoke marks a token revoked. Ingest and the dashboard check the token
of every request in PostgreSQL, so from the next request on every replica
answers 401 to it. Name the token by its ID or PREFIX from ` + "`fairway tokens list`" + `,
or by the whole token; "-" reads the whole token from stdin, which keeps it
out of the shell history and the process list. Revoking a revoked token
changes nothing and is not an error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref := args[0]
			if ref == "-" {
				var err error
				if ref, err = readToken(cmd.InOrStdin()); err != nil {
					return err
				}
			}
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			t, err := st.RevokeToken(cmd.Context(), ref)
			switch {
			case errors.Is(err, tenancy.ErrTokenRevoked):
				fmt.Fprintf(c.out, "token %s was revoked already, at %s\n", describeToken(t), t.RevokedAt.UTC().Format(time.RFC3339))
				return nil
			case errors.Is(err, tenancy.ErrInvalidArgument):
				return usageError{err}
			case err != nil:
				return err
			}
			fmt.Fprintf(c.out, "revoked token %s at %s\n", describeToken(t), t.RevokedAt.UTC().Format(time.RFC3339))
			return nil
		},
	}
}

// readToken reads one token from r: its first line, trimmed.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the token from stdin: %w", err)
	}
	if line = strings.TrimSpace(line); line == "" {
		return "", usageError{errors.New("no token on stdin")}
	}
	return line, nil
}

// describeToken names a token for the operator: `7 (fw_AbCdEfGh, tenant
// acme)`, `9 (-, admin "ops")`.
func describeToken(t tenancy.TokenInfo) string {
	who := "tenant " + t.Tenant
	if t.Admin {
		who = "admin " + strconv.Quote(t.Name)
	}
	return fmt.Sprintf("%d (%s, %s)", t.ID, orDash(t.Prefix), who)
}

func tokenKind(t tenancy.TokenInfo) string {
	if t.Admin {
		return "admin"
	}
	return "tenant"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
