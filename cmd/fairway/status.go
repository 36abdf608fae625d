package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
)

func (c *cli) statusCmd() *cobra.Command {
	var tenant string
	var asJSON, partitions bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Per tenant and destination: backlog, oldest waiting event, slots in use, weight, dead letters, and why work waits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			nc, js, err := c.jetstream()
			if err != nil {
				return err
			}
			defer nc.Close()
			src := &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), JS: js, Dispatchers: st}
			rows, err := src.Rows(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			if partitions {
				return c.printPartitions(cmd.Context(), src, rows, asJSON)
			}
			if asJSON {
				enc := json.NewEncoder(c.out)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TENANT\tDEST\tBACKLOG\tOLDEST\tSLOTS\tWEIGHT\tDEAD\tWHY")
			for _, r := range rows {
				oldest := "-"
				if r.Backlog > 0 {
					oldest = r.OldestAge.Round(time.Millisecond).String()
				}
				why := r.Reason
				if r.WaitDetail != "" {
					why += ": " + shorten(r.WaitDetail, 80)
				}
				if r.Replaying {
					why += fmt.Sprintf(" (replay: %d left, %d/%d replay slots)", r.ReplayLeft, r.ReplayInUse, r.ReplaySlots)
				}
				if r.Expiring {
					why += fmt.Sprintf(" (oldest expires in %s: PRODUCTS' MaxAge)", r.ExpiresIn.Round(time.Second))
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d/%d\t%d\t%d\t%s\n", r.Tenant, r.Dest, r.Backlog, oldest, r.InUse, r.Limit, r.Weight, r.DeadLetters, why)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if err := c.printQuotas(cmd.Context(), st, tenant); err != nil {
				return err
			}
			if tenant != "" {
				return nil
			}
			fmt.Fprintln(c.out)
			return c.printPartitions(cmd.Context(), src, rows, false)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	cmd.Flags().BoolVar(&partitions, "partitions", false, "print only the partitions of PRODUCTS: the dispatcher reading each and its backlog")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	c.addFlags(cmd.Flags(), usesDatabase|usesNATS|usesLog)
	return cmd
}

// printPartitions prints the partitions of PRODUCTS, the dispatcher
// reading each and their backlog (from rows), as a table or JSON.
func (c *cli) printPartitions(ctx context.Context, src *status.Source, rows []status.Row, asJSON bool) error {
	layout, parts, err := src.Partitions(ctx, rows)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(parts)
	}
	if layout.Partitions == 0 {
		fmt.Fprintln(c.out, "PRODUCTS has no partitions: every dispatcher reads it whole and they split the (tenant, destination) pairs.")
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTITION\tDISPATCHER\tSEEN\tBACKLOG\tTENANTS WAITING")
	for _, p := range parts {
		who, seen := p.Dispatcher, p.Seen.Round(100*time.Millisecond).String()
		if who == "" {
			who, seen = "(none)", "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\n", p.Partition, who, seen, p.Backlog, p.Tenants)
	}
	return w.Flush()
}

// jetstream connects to NATS (--nats-url and the credentials and TLS
// flags) for commands that read the streams.
func (c *cli) jetstream() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := c.nats.Connect("fairway-cli")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
