package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func (c *cli) tenantsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Create tenants, issue tokens, set limits, weights and quotas",
	}
	cmd.AddCommand(c.tenantsCreateCmd(), c.tenantsListCmd(), c.tenantsSetLimitCmd(), c.tenantsSetWeightCmd(), c.tenantsSetRateCmd(), c.tenantsSetQuotaCmd(), c.tenantsTokenCmd(),
		c.tenantsPauseCmd("pause", true), c.tenantsPauseCmd("resume", false))
	c.addFlags(cmd.PersistentFlags(), usesDatabase|usesLog)
	return cmd
}

func (c *cli) tenantsCreateCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "create <tenant-id>",
		Short: "Create a tenant and print its API token (shown once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			t, tok, err := st.CreateTenant(cmd.Context(), args[0], name)
			if errors.Is(err, tenancy.ErrTenantExists) {
				return fmt.Errorf("%w; fairway tenants token %s issues another token for it", err, args[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.errOut, "created tenant %s (weight %d); its token is shown once:\n", t.ID, t.Weight)
			fmt.Fprintln(c.out, tok)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "display name")
	return cmd
}

func (c *cli) tenantsTokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "token <tenant-id>",
		Short: "Issue another API token for a tenant (shown once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			tok, err := st.IssueToken(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(c.out, tok)
			return nil
		},
	}
}

func (c *cli) tenantsListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List tenants with their weights, per-destination limits, pauses and ingest quotas",
		Long: `list prints a row per tenant and destination. PAUSED says what holds the
destination back: tenant (fairway tenants pause <tenant>), dest (fairway
tenants pause <tenant> --dest <destination>), tenant,dest for both, or
no.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			ts, err := st.Tenants(cmd.Context())
			if err != nil {
				return err
			}
			quotas, err := quotasByTenant(cmd.Context(), st)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TENANT\tWEIGHT\tPAUSED\tDEST\tMAX SLOTS\tIN USE\tDEST WEIGHT\tRATE\tQUOTA")
			for _, t := range ts {
				ls, err := st.Limits(cmd.Context(), t.ID)
				if err != nil {
					return err
				}
				q := quotas[t.ID].String()
				if len(ls) == 0 {
					fmt.Fprintf(w, "%s\t%d\t%s\t-\t-\t-\t-\t-\t%s\n", t.ID, t.Weight, pausedBy(t.Paused, false), q)
				}
				for _, l := range ls {
					dw := "-"
					if l.Weight > 0 {
						dw = strconv.Itoa(l.Weight)
					}
					rate := "-"
					if l.Rate > 0 {
						rate = fmt.Sprintf("%d/s", l.Rate)
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", t.ID, t.Weight, pausedBy(t.Paused, l.Paused), l.Dest, l.MaxSlots, l.InUse, dw, rate, q)
				}
			}
			return w.Flush()
		},
	}
}

// pausedBy is the PAUSED column of tenants list: what holds a destination
// of a tenant back.
func pausedBy(tenant, dest bool) string {
	var by []string
	if tenant {
		by = append(by, "tenant")
	}
	if dest {
		by = append(by, "dest")
	}
	if by == nil {
		return "no"
	}
	return strings.Join(by, ",")
}

func (c *cli) tenantsSetLimitCmd() *cobra.Command {
	var dest string
	var max int
	cmd := &cobra.Command{
		Use:   "set-limit <tenant-id> --dest <destination> --max <n>",
		Short: "Set how many batches of a tenant may run at once in one destination (live)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dest == "" || max < 1 {
				return usageError{fmt.Errorf("--dest and --max (≥ 1) are required")}
			}
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := st.SetLimit(cmd.Context(), args[0], dest, max); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s %s: max %d slots\n", args[0], dest, max)
			return nil
		},
	}
	cmd.Flags().StringVar(&dest, "dest", "", "destination: postgres, clickhouse or b2b:<partner>")
	cmd.Flags().IntVar(&max, "max", 0, "slots (≥ 1)")
	return cmd
}

func (c *cli) tenantsSetWeightCmd() *cobra.Command {
	var dest string
	var weight int
	cmd := &cobra.Command{
		Use:   "set-weight <tenant-id> --weight <n> [--dest <destination>]",
		Short: "Set a tenant's fair-share weight, for all destinations or one (live)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if weight < 1 {
				return usageError{fmt.Errorf("--weight (≥ 1) is required")}
			}
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			if dest == "" {
				err = st.SetWeight(cmd.Context(), args[0], weight)
			} else {
				err = st.SetDestWeight(cmd.Context(), args[0], dest, weight)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s: weight %d%s\n", args[0], weight, map[bool]string{true: "", false: " in " + dest}[dest == ""])
			return nil
		},
	}
	cmd.Flags().StringVar(&dest, "dest", "", "only this destination (default: the tenant's weight everywhere)")
	cmd.Flags().IntVar(&weight, "weight", 0, "weight (≥ 1)")
	return cmd
}

func (c *cli) tenantsSetRateCmd() *cobra.Command {
	var (
		dest string
		rate int
	)
	cmd := &cobra.Command{
		Use:   "set-rate <tenant-id> --dest <destination> --events-per-sec <n>",
		Short: "Cap the events per second dispatched for a tenant to one destination, on top of its slots (live; 0 removes the cap)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dest == "" || !cmd.Flags().Changed("events-per-sec") {
				return usageError{fmt.Errorf("--dest and --events-per-sec are required")}
			}
			if rate < 0 {
				return usageError{fmt.Errorf("--events-per-sec %d: want 0 (no cap) or more", rate)}
			}
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := st.SetDestRate(cmd.Context(), args[0], dest, rate); err != nil {
				return err
			}
			if rate == 0 {
				fmt.Fprintf(c.out, "%s: no rate cap in %s\n", args[0], dest)
				return nil
			}
			fmt.Fprintf(c.out, "%s: at most %d events/s in %s\n", args[0], rate, dest)
			return nil
		},
	}
	cmd.Flags().StringVar(&dest, "dest", "", "destination: postgres, clickhouse or b2b:<partner>")
	cmd.Flags().IntVar(&rate, "events-per-sec", 0, "events per second at most (0: no cap)")
	return cmd
}

func (c *cli) adminTokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "admin-token", Short: "Manage admin tokens for operator endpoints"}
	var name string
	create := &cobra.Command{
		Use:   "create",
		Short: "Issue an admin token (shown once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			tok, err := st.IssueAdminToken(cmd.Context(), name)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.out, tok)
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "operator", "who the token is for")
	cmd.AddCommand(create)
	c.addFlags(cmd.PersistentFlags(), usesDatabase|usesLog)
	return cmd
}

func (c *cli) tenantsPauseCmd(verb string, paused bool) *cobra.Command {
	var dest string
	cmd := &cobra.Command{
		Use:   verb + " <tenant-id> [--dest <destination>]",
		Short: map[bool]string{true: "Stop dispatching a tenant's work (all destinations, or one); running batches finish", false: "Resume a paused tenant or destination"}[paused],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			what := args[0]
			if dest == "" {
				err = st.SetPaused(cmd.Context(), args[0], paused)
			} else {
				err = st.SetDestPaused(cmd.Context(), args[0], dest, paused)
				what += " " + dest
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s: %sd\n", what, verb)
			return nil
		},
	}
	cmd.Flags().StringVar(&dest, "dest", "", "only this destination")
	return cmd
}
