package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/internal/dlq"
)

// dlqFlags are shared by the dlq subcommands.
type dlqFlags struct {
	stream string
}

func (c *cli) dlqCmd() *cobra.Command {
	f := &dlqFlags{}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, redrive and remove dead letters (stream DLQ)",
		Long: `Dead letters are events a destination refused or gave up on, stored on
dlq.<destination>.<tenant> with the reason, class, attempts and source
sequence. Redrive sends a letter's event back to that destination only,
as a work item that takes one of the tenant's slots there (the slot limit
holds), and deletes the letter once WORK has the item; the other
destinations do not see the event again. Lost-range letters cannot be
redriven.`,
	}
	cmd.PersistentFlags().StringVar(&f.stream, "stream", dlq.StreamName, "dead-letter stream")
	cmd.AddCommand(c.dlqListCmd(f), c.dlqShowCmd(f), c.dlqRedriveCmd(f), c.dlqRmCmd(f))
	c.addFlags(cmd.PersistentFlags(), usesNATS)
	return cmd
}

// queue connects to NATS and opens the dead-letter stream.
func (c *cli) queue(ctx context.Context, f *dlqFlags) (*dlq.Queue, jetstream.JetStream, func(), error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, js, err := c.jetstream()
	if err != nil {
		return nil, nil, nil, err
	}
	q, err := dlq.Open(cctx, js, f.stream)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return q, js, nc.Close, nil
}

func parseIDs(args []string) ([]uint64, error) {
	ids := make([]uint64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil || id == 0 {
			return nil, usageError{fmt.Errorf("letter id %q is not a positive number", a)}
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (c *cli) dlqListCmd(f *dlqFlags) *cobra.Command {
	var filter dlq.Filter
	cmd := &cobra.Command{
		Use:   "list [--dest <destination>] [--tenant <tenant>] [--limit n]",
		Short: "List dead letters, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, _, closeNC, err := c.queue(cmd.Context(), f)
			if err != nil {
				return err
			}
			defer closeNC()
			ls, err := q.List(cmd.Context(), filter)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTORED\tDEST\tTENANT\tKIND\tSOURCE SEQ\tCLASS\tATTEMPTS\tREASON")
			for _, l := range ls {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", l.ID, l.StoredAt.UTC().Format(time.RFC3339), l.Dest, l.Tenant,
					l.Kind, l.SourceSeq, l.Class, l.Attempts, shorten(l.Reason, 80))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&filter.Dest, "dest", "", "only this destination")
	cmd.Flags().StringVar(&filter.Tenant, "tenant", "", "only this tenant")
	cmd.Flags().IntVar(&filter.Limit, "limit", 100, "at most this many (0: all)")
	return cmd
}

func (c *cli) dlqShowCmd(f *dlqFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show <id>",
		Short: "Show one dead letter: every header and the original event",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			q, _, closeNC, err := c.queue(cmd.Context(), f)
			if err != nil {
				return err
			}
			defer closeNC()
			l, err := q.Get(cmd.Context(), ids[0])
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			row := func(k string, v any) { fmt.Fprintf(w, "%s:\t%v\n", k, v) }
			row("id", l.ID)
			row("stored", l.StoredAt.UTC().Format(time.RFC3339Nano))
			row("kind", l.Kind)
			row("dest", l.Dest)
			row("tenant", l.Tenant)
			row("class", l.Class)
			row("rule", l.Rule)
			row("reason", l.Reason)
			row("attempts", l.Attempts)
			row("deliveries", l.Deliveries)
			row("first failure", l.FirstFailure.UTC().Format(time.RFC3339Nano))
			row("last failure", l.LastFailure.UTC().Format(time.RFC3339Nano))
			row("source", fmt.Sprintf("%s seq %d %s", l.SourceStream, l.SourceSeq, l.SourceSubject))
			row("lease", l.Lease)
			keys := make([]string, 0, len(l.Header))
			for k := range l.Header {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				row(k, strings.Join(l.Header[k], ", "))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "\n%s\n", l.Data)
			return nil
		},
	}
}

func (c *cli) dlqRedriveCmd(f *dlqFlags) *cobra.Command {
	var filter dlq.Filter
	var all bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "redrive [--dest <destination>] [--tenant <tenant>] [--all] [id...]",
		Short: "Send dead-lettered events back to the destination that refused them, and delete their letters",
		Long: `redrive sends each letter's event back to the one destination whose letter
it is, and to no other: per tenant and destination it takes a slot (waiting
up to --wait while the tenant is at its slot limit there; a paused tenant
is not waited for), hands the destination's sinks one work item that
carries the events, and deletes the letters once WORK has stored it. The
sinks apply the events idempotently (a newer version already applied
wins); an event that fails again becomes a new letter. It needs
PostgreSQL (DATABASE_URL) for the slots and NATS for the streams.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			filter.IDs = ids
			if !all && filter.Dest == "" && filter.Tenant == "" && len(ids) == 0 {
				return usageError{fmt.Errorf("name letters by id, --dest, --tenant, or say --all")}
			}
			st, pool, err := c.store(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			q, _, closeNC, err := c.queue(cmd.Context(), f)
			if err != nil {
				return err
			}
			defer closeNC()
			res, err := q.Redrive(cmd.Context(), filter, dlq.RedriveConfig{Slots: st, WaitForSlot: wait})
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range res {
				if r.Err != nil {
					failed++
					fmt.Fprintf(c.errOut, "letter %d (%s %s): left in place: %v\n", r.Letter.ID, r.Letter.Dest, r.Letter.Tenant, r.Err)
					continue
				}
				fmt.Fprintf(c.out, "letter %d (%s %s) → %s, work item %s\n", r.Letter.ID, r.Letter.Dest, r.Letter.Tenant, r.Letter.Dest, r.Item)
			}
			fmt.Fprintf(c.errOut, "redriven %d, left %d\n", len(res)-failed, failed)
			if failed > 0 {
				return fmt.Errorf("%d letters could not be redriven", failed)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&filter.Dest, "dest", "", "letters of this destination")
	cmd.Flags().StringVar(&filter.Tenant, "tenant", "", "letters of this tenant")
	cmd.Flags().BoolVar(&all, "all", false, "every letter")
	cmd.Flags().DurationVar(&wait, "wait", dlq.RedriveWaitDefault, "how long to wait for a free slot of a tenant at its limit in a destination")
	c.addFlags(cmd.Flags(), usesDatabase|usesLog) // the slots a redriven item takes; the store logs its migrations
	return cmd
}

func (c *cli) dlqRmCmd(f *dlqFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rm <id>...",
		Short: "Delete dead letters without redriving them (e.g. lost-range records once handled)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			q, _, closeNC, err := c.queue(cmd.Context(), f)
			if err != nil {
				return err
			}
			defer closeNC()
			for _, id := range ids {
				if err := q.Delete(cmd.Context(), id); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "deleted letter %d\n", id)
			}
			return nil
		},
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
