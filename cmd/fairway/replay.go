package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/internal/replay"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func (c *cli) replayCmd() *cobra.Command {
	var (
		req     replay.Request
		since   time.Duration
		from    string
		wait    bool
		noWait  bool
		refresh time.Duration
		rate    string
	)
	cmd := &cobra.Command{
		Use:   "replay --tenant <id> --dest <destination|all> (--from-seq N | --since 2h | --from 2026-11-20T10:00:00Z) [--to-seq M] [--rate N|unlimited] [--slots N]",
		Short: "Send a tenant's events to a destination again, through the normal fair path, beside its live events",
		Long: `replay sends the tenant's events for the destination (or every destination
with --dest all) again, from the start you give up to where its dispatch
cursor is (or through --to-seq). The replay runs in a lane of its own: a
cursor and --slots slots of its own, so the tenant's live events keep their
cursor and slots and go on flowing while it replays. Sinks are idempotent
and never replace a newer version with an older one, so replaying twice
leaves every destination as after once.

A replay is throttled so that it does not take the machines from live
traffic: each dispatcher replays at most --rate events per second per
destination (default: the dispatcher's --replay-rate; "unlimited" for as
fast as the replay's slots allow). A replay started while another runs for
the same tenant and destination widens it to cover both.

On a terminal it shows a progress bar (events dispatched again / total, rate,
ETA) until the replay is through; elsewhere it prints a line every few
seconds with --wait, or starts the replay and returns.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			given := 0
			for _, b := range []bool{req.FromSeq > 0, since > 0, from != ""} {
				if b {
					given++
				}
			}
			if req.Tenant == "" || req.Dest == "" || given != 1 {
				return usageError{fmt.Errorf("--tenant, --dest and exactly one of --from-seq, --since, --from are required")}
			}
			if req.Slots < 1 || req.Slots > tenancy.ReplaySlotsMax {
				return usageError{fmt.Errorf("--slots %d: want 1..%d", req.Slots, tenancy.ReplaySlotsMax)}
			}
			switch rate {
			case "", "default":
			case "unlimited":
				req.Rate = tenancy.ReplayUnthrottled
			default:
				n, err := strconv.Atoi(rate)
				if err != nil || n < 1 {
					return usageError{fmt.Errorf("--rate %q: want events per second (a positive number) or unlimited", rate)}
				}
				req.Rate = n
			}
			switch {
			case since > 0:
				req.From = time.Now().Add(-since)
			case from != "":
				t, err := time.Parse(time.RFC3339, from)
				if err != nil {
					return usageError{fmt.Errorf("--from %q: want an RFC 3339 time such as 2026-11-20T10:00:00Z", from)}
				}
				req.From = t
			}
			svc, done, err := c.replayService(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			rs, err := svc.Start(cmd.Context(), req)
			if err != nil {
				return err
			}
			for _, r := range rs {
				fmt.Fprintf(c.errOut, "replay %d: %s → %s, sequences %d..%d, %d events, rate %s\n", r.ID, r.Tenant, r.Dest, r.FromSeq, r.End()-1, r.Total, rateString(r.Rate))
			}
			tty := isTerminal(c.out)
			if noWait || (!wait && !tty) {
				return nil
			}
			return watch(cmd.Context(), svc, rs, c.out, tty, refresh)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Tenant, "tenant", "", "tenant id")
	f.StringVar(&req.Dest, "dest", "", "destination (postgres, clickhouse, b2b:<partner>) or all")
	f.Uint64Var(&req.FromSeq, "from-seq", 0, "replay from this PRODUCTS sequence")
	f.Uint64Var(&req.ToSeq, "to-seq", 0, "replay up to this PRODUCTS sequence (default: up to where the cursor is)")
	f.DurationVar(&since, "since", 0, "replay events stored within this long (e.g. 2h)")
	f.StringVar(&from, "from", "", "replay events stored at or after this RFC 3339 time")
	f.StringVar(&rate, "rate", "", "events per second per destination, or unlimited (default: the dispatcher's --replay-rate)")
	f.IntVar(&req.Slots, "slots", 1, fmt.Sprintf("batches the replay may have in a destination at once, on top of the tenant's own slots (1..%d)", tenancy.ReplaySlotsMax))
	f.BoolVar(&wait, "wait", false, "watch progress until the replay is through (default on a terminal)")
	f.BoolVar(&noWait, "no-wait", false, "start the replay and return")
	f.DurationVar(&refresh, "refresh", time.Second, "how often progress is read")
	cmd.AddCommand(c.replayStatusCmd(), c.replayCancelCmd())
	c.addFlags(cmd.PersistentFlags(), usesDatabase|usesNATS|usesLog)
	return cmd
}

func (c *cli) replayService(ctx context.Context) (*replay.Service, func(), error) {
	st, pool, err := c.store(ctx)
	if err != nil {
		return nil, nil, err
	}
	nc, js, err := c.jetstream()
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	svc := &replay.Service{Store: st, Pool: pool, JS: js, Reader: work.NewReader(nc, "")}
	return svc, func() { nc.Close(); pool.Close() }, nil
}

// watch shows the replays' progress until all are through or ctx ends.
func watch(ctx context.Context, svc *replay.Service, rs []replay.Replay, out io.Writer, tty bool, every time.Duration) error {
	var total int64
	for _, r := range rs {
		total += int64(r.Total)
	}
	var bar *progressbar.ProgressBar
	if tty {
		bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(out), progressbar.OptionSetDescription("replay"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("events"),
			progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(), progressbar.OptionClearOnFinish())
	}
	start, lastLine := time.Now(), time.Time{}
	for {
		var done int64
		running := 0
		for _, r := range rs {
			cur, err := svc.Get(ctx, r.ID)
			if err != nil {
				return err
			}
			done += int64(cur.Done)
			if cur.State == replay.StateRunning {
				running++
			}
		}
		if bar != nil {
			_ = bar.Set64(done)
		} else if time.Since(lastLine) >= 5*time.Second || running == 0 {
			lastLine = time.Now()
			rate := float64(done) / max(time.Since(start).Seconds(), 0.001)
			fmt.Fprintf(out, "replay: %d/%d events dispatched again (%.0f/s)\n", done, total, rate)
		}
		if running == 0 {
			if bar != nil {
				_ = bar.Finish()
			}
			fmt.Fprintf(out, "replay: %d events dispatched again in %s; sinks apply them as slots allow\n", done, time.Since(start).Round(time.Second))
			return nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "\nreplay: still running in the background; `fairway replay status` shows it")
			return nil
		case <-time.After(every):
		}
	}
}

func (c *cli) replayStatusCmd() *cobra.Command {
	var tenant string
	var all bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List replays and their progress (running ones unless --all)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			svc, done, err := c.replayService(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			rs, err := svc.List(cmd.Context(), tenant, !all)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTENANT\tDEST\tFROM\tTO\tDONE\tTOTAL\tRATE\tSTATE\tSTARTED")
			for _, r := range rs {
				fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r.ID, r.Tenant, r.Dest, r.FromSeq, r.End()-1, r.Done, r.Total, rateString(r.Rate), r.State, r.CreatedAt.Format(time.RFC3339))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	cmd.Flags().BoolVar(&all, "all", false, "include finished and cancelled replays")
	return cmd
}

func (c *cli) replayCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel <id>",
		Short: "Stop a running replay: the rest of its range is skipped (it was applied before the replay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return usageError{fmt.Errorf("replay id %q is not a number", args[0])}
			}
			svc, done, err := c.replayService(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := svc.Cancel(cmd.Context(), id)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "replay %d cancelled after %d of %d events\n", r.ID, r.Done, r.Total)
			return nil
		},
	}
}

// rateString shows a replay's rate (replay.Request.Rate).
func rateString(rate int) string {
	switch {
	case rate == 0:
		return "default"
	case rate < 0:
		return "unlimited"
	}
	return strconv.Itoa(rate) + "/s"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
