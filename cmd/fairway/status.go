package main

import (
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
	var asJSON bool
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
			src := &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), JS: js}
			rows, err := src.Rows(cmd.Context(), tenant)
			if err != nil {
				return err
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
			return c.printQuotas(cmd.Context(), st, tenant)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	c.addFlags(cmd.Flags(), usesDatabase|usesNATS|usesLog)
	return cmd
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
