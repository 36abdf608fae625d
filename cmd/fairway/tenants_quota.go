package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func (c *cli) tenantsSetQuotaCmd() *cobra.Command {
	var q tenancy.Quota
	var clear bool
	cmd := &cobra.Command{
		Use:   "set-quota <tenant-id> [--events-per-sec N [--burst M]] [--bytes-per-sec B [--bytes-burst C]] [--max-backlog K] | --clear",
		Short: "Set what ingest takes in for a tenant: events/s, payload bytes/s, events waiting (live; 0 = off)",
		Long: `Set a tenant's ingest quotas. Only the quotas named change; 0 switches
one off, --clear all of them. Over a quota, ingest answers 429 with
Retry-After and stores nothing of the request; CSV imports slow down to it.
--burst (--bytes-burst) is how much a full bucket takes at once, and so the
largest request; it defaults to one second of the rate. Every ingest replica
applies a change within a second. See docs/quotas.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			named := false
			for _, n := range []string{"events-per-sec", "burst", "bytes-per-sec", "bytes-burst", "max-backlog"} {
				named = named || f.Changed(n)
			}
			if clear == named {
				return usageError{errors.New("name the quotas to set (--events-per-sec, --burst, --bytes-per-sec, --bytes-burst, --max-backlog) or say --clear")}
			}
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			tenant := args[0]
			if clear {
				if err := st.ClearQuota(cmd.Context(), tenant); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "%s: no quota\n", tenant)
				return nil
			}
			cur, err := st.Quota(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			// A rate given without its burst gets the default burst of
			// the new rate; a rate switched off takes its burst along.
			if f.Changed("events-per-sec") {
				cur.EventsPerSec, cur.EventsBurst = q.EventsPerSec, 0
			}
			if f.Changed("burst") {
				cur.EventsBurst = q.EventsBurst
			}
			if f.Changed("bytes-per-sec") {
				cur.BytesPerSec, cur.BytesBurst = q.BytesPerSec, 0
			}
			if f.Changed("bytes-burst") {
				cur.BytesBurst = q.BytesBurst
			}
			if f.Changed("max-backlog") {
				cur.MaxBacklog = q.MaxBacklog
			}
			if err := st.SetQuota(cmd.Context(), cur); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s: quota %s\n", tenant, quotaText(cur.WithDefaults()))
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&q.EventsPerSec, "events-per-sec", 0, "events per second ingest takes in for the tenant (0: off)")
	f.Int64Var(&q.EventsBurst, "burst", 0, "events a full bucket takes at once, the most in one request (default: one second of --events-per-sec)")
	f.Int64Var(&q.BytesPerSec, "bytes-per-sec", 0, "payload bytes per second (0: off)")
	f.Int64Var(&q.BytesBurst, "bytes-burst", 0, "payload bytes a full bucket takes at once (default: one second of --bytes-per-sec)")
	f.Int64Var(&q.MaxBacklog, "max-backlog", 0, "refuse the tenant's events while this many wait for its slowest destination (0: off)")
	f.BoolVar(&clear, "clear", false, "remove every quota of the tenant")
	return cmd
}

// quotasByTenant reads every quota that is set.
func quotasByTenant(ctx context.Context, st *tenancy.Store) (map[string]tenancy.Quota, error) {
	qs, err := st.Quotas(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]tenancy.Quota, len(qs))
	for _, q := range qs {
		m[q.Tenant] = q
	}
	return m, nil
}

// quotaText is a quota as the CLI shows it ("none" for no quota).
func quotaText(q tenancy.Quota) string {
	if q.Off() {
		return "none"
	}
	return q.String()
}

// printQuotas lists the ingest quotas that are set, of every tenant or of
// tenant only, under a heading; nothing when none is.
func (c *cli) printQuotas(ctx context.Context, st *tenancy.Store, tenant string) error {
	qs, err := st.Quotas(ctx)
	if err != nil {
		return err
	}
	qs = slices.DeleteFunc(qs, func(q tenancy.Quota) bool { return tenant != "" && q.Tenant != tenant })
	if len(qs) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nTENANT\tINGEST QUOTA")
	for _, q := range qs {
		fmt.Fprintf(w, "%s\t%s\n", q.Tenant, q)
	}
	return w.Flush()
}
