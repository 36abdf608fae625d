package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func (c *cli) cursorsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cursors",
		Short: "Resolve dispatch cursors held for a stream reset",
	}
	cmd.AddCommand(c.cursorsResetCmd())
	c.addFlags(cmd.PersistentFlags(), usesDatabase|usesNATS|usesLog)
	return cmd
}

func (c *cli) cursorsResetCmd() *cobra.Command {
	var (
		tenant, dest, to string
		all              bool
	)
	cmd := &cobra.Command{
		Use:   "reset (--tenant <id> | --all) [--dest <destination>] --to first|last",
		Short: "Move the cursors held for a stream reset and dispatch again",
		Long: `A dispatch cursor is a sequence of stream PRODUCTS. When the stream is
created anew (a NATS server replaced by an empty one, the stream deleted) or
restored from an older backup, cursors point past its end. The dispatcher
holds each such (tenant, destination) rather than skip the events before
the old cursor, and ` + "`fairway status`" + ` shows it as "stream reset".

reset checks the stream too (a cursor it finds past the end is held and
reset with the others), then moves each held cursor of the tenant (or of
every tenant with --all), in every destination or in --dest:

  --to first   to the stream's first event: everything the stream holds is
               dispatched; events applied before are applied again, which
               the sinks' idempotency absorbs
  --to last    past the stream's last event: what it holds is skipped, the
               events stored from now on are dispatched

Replays running on a moved cursor end. Cursors that are not held are left
alone. Running dispatchers pick the move up at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (tenant == "") == !all {
				return usageError{errors.New("give --tenant <id> or --all")}
			}
			where, err := tenancy.ParseResetTo(to)
			if err != nil {
				return usageError{errors.New("--to must be first or last")}
			}
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
			stream, err := js.Stream(cmd.Context(), events.StreamName)
			if err != nil {
				return fmt.Errorf("stream %s: %w", events.StreamName, err)
			}
			check, moves, err := st.ResetCursors(cmd.Context(), dispatch.StreamPosition(stream), tenant, dest, where)
			if err != nil {
				return err
			}
			if check.Recreated {
				fmt.Fprintf(c.errOut, "stream %s was created anew since the dispatcher last looked: every cursor past 1 was held\n", events.StreamName)
			}
			pos := check.Position
			fmt.Fprintf(c.errOut, "stream %s holds sequences %d..%d\n", events.StreamName, max(pos.FirstSeq, 1), pos.LastSeq)
			if len(moves) == 0 {
				fmt.Fprintln(c.out, "no cursor held for a stream reset matches; nothing moved")
				return nil
			}
			for _, m := range moves {
				fmt.Fprintf(c.out, "%s %s: cursor %d → %d\n", m.Tenant, m.Dest, m.From, m.To)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose held cursors to move")
	cmd.Flags().BoolVar(&all, "all", false, "every tenant's held cursors")
	cmd.Flags().StringVar(&dest, "dest", "", "only this destination: postgres, clickhouse or b2b:<partner> (default: all)")
	cmd.Flags().StringVar(&to, "to", "", "first (dispatch everything the stream holds) or last (skip to its end); required")
	return cmd
}
