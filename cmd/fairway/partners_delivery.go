package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

// The partner commands about what a partner receives and how it went:
// set-transform, set-batch, deliveries.

func (c *cli) partnersSetTransformCmd() *cobra.Command {
	var (
		filter, mapping, filterFile, mapFile string
		clear                                bool
	)
	cmd := &cobra.Command{
		Use:   "set-transform <tenant-id> <partner> [--filter EXPR] [--map EXPR] | --clear",
		Short: "Filter a partner's events and map them to its own JSON (CEL expressions)",
		Long: `Sets the partner's filter and map, both CEL expressions (https://cel.dev)
over the variable event: seq, product_id, version, op, occurred_at and, when
the event has one, payload. --filter is a bool: events for which it is false
are not sent (and count as delivered). --map is the JSON value sent in the
event's place in "events". Both replace what the partner had; one not given
is removed. An expression that does not compile is refused with CEL's error
and nothing changes. --clear removes both: events go out as they are.
Sinks pick the change up within 5 seconds. docs/partners.md has examples.

  fairway partners set-transform acme erp \
    --filter 'event.op == "upsert"' \
    --map '{"sku": event.product_id, "price_cents": int(math.round(event.payload.price * 100.0))}'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var t b2b.Transform
			var err error
			if t.Filter, err = exprFlag("filter", filter, filterFile); err != nil {
				return err
			}
			if t.Map, err = exprFlag("map", mapping, mapFile); err != nil {
				return err
			}
			switch {
			case clear && !t.IsZero():
				return usageError{errors.New("--clear takes no --filter or --map")}
			case !clear && t.IsZero():
				return usageError{errors.New("give --filter, --map (or their -file forms), or --clear")}
			}
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			p, err := reg.SetTransform(cmd.Context(), args[0], args[1], t)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s %s transform: %s\n", p.Tenant, p.Dest(), p.Transform.Kind())
			return nil
		},
	}
	cmd.Flags().StringVar(&filter, "filter", "", "CEL bool expression: the events to send")
	cmd.Flags().StringVar(&mapping, "map", "", "CEL expression: the JSON sent for each event")
	cmd.Flags().StringVar(&filterFile, "filter-file", "", "read --filter from this file")
	cmd.Flags().StringVar(&mapFile, "map-file", "", "read --map from this file")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the filter and the map")
	return cmd
}

// exprFlag returns the expression given inline or in a file, not both.
func exprFlag(name, inline, file string) (string, error) {
	switch {
	case inline != "" && file != "":
		return "", usageError{fmt.Errorf("give --%s or --%s-file, not both", name, name)}
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usageError{fmt.Errorf("--%s-file: %w", name, err)}
		}
		if strings.TrimSpace(string(b)) == "" {
			return "", usageError{fmt.Errorf("--%s-file %s is empty", name, file)}
		}
		return string(b), nil
	}
	return inline, nil
}

func (c *cli) partnersSetBatchCmd() *cobra.Command {
	maxEvents := -1
	cmd := &cobra.Command{
		Use:   "set-batch <tenant-id> <partner> --max-events N",
		Short: "Send a partner one event per request (1) or batches of up to N events",
		Long: `Bounds the events of one request to the partner: 1 sends every event on its
own, N up to N, 0 as many as --max-request-bytes allows (the default).
Sinks pick the change up at once.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("max-events") {
				return usageError{errors.New("--max-events is required")}
			}
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			p, err := reg.SetMaxEvents(cmd.Context(), args[0], args[1], maxEvents)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s %s sends %s per request\n", p.Tenant, p.Dest(), batchText(p.MaxEvents))
			return nil
		},
	}
	cmd.Flags().IntVar(&maxEvents, "max-events", 0, fmt.Sprintf("events per request: 1 (single), up to %d, or 0 (as many as fit)", b2b.MaxEventsMax))
	return cmd
}

func (c *cli) partnersSetRateCmd() *cobra.Command {
	perSec := -1
	cmd := &cobra.Command{
		Use:   "set-rate <tenant-id> <partner> --requests-per-sec N",
		Short: "Declare the most requests a second a partner takes (0: no limit)",
		Long: `Every sink replica paces its requests to the partner through one
PostgreSQL row, so together they never send more than N requests in any
second. A batch waiting for its turn keeps its slot. Sinks pick the
change up at once.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("requests-per-sec") {
				return usageError{errors.New("--requests-per-sec is required")}
			}
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			p, err := reg.SetRequestRate(cmd.Context(), args[0], args[1], perSec)
			if err != nil {
				return err
			}
			if p.RequestsPerSec == 0 {
				fmt.Fprintf(c.out, "%s %s: no request rate limit\n", p.Tenant, p.Dest())
				return nil
			}
			fmt.Fprintf(c.out, "%s %s takes at most %d requests a second\n", p.Tenant, p.Dest(), p.RequestsPerSec)
			return nil
		},
	}
	cmd.Flags().IntVar(&perSec, "requests-per-sec", 0, fmt.Sprintf("requests a second, 1 to %d, or 0 (no limit)", b2b.RequestsPerSecMax))
	return cmd
}

// batchText says how many events a request holds.
func batchText(maxEvents int) string {
	switch maxEvents {
	case 0:
		return "as many events as fit"
	case 1:
		return "1 event"
	}
	return "up to " + strconv.Itoa(maxEvents) + " events"
}

func (c *cli) partnersDeliveriesCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "deliveries <tenant-id> <partner>",
		Short: "List the latest requests to a partner: status, latency, error, retries",
		Long: fmt.Sprintf(`Lists the newest request attempts to the partner, newest first: when it
was sent, its webhook-id (the idempotency key: the same on every retry of
the same events), how many events it held, the partner's HTTP status (- for
no answer), the latency, the retry (how many earlier attempts of the same
webhook-id the log holds) and the error. The sinks keep the newest %d
attempts per tenant and partner.`, b2b.DeliveryLogKeepDefault),
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usageError{fmt.Errorf("--limit %d is below 1", limit)}
			}
			reg, _, done, err := c.registry(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer done()
			if _, err := reg.Get(cmd.Context(), args[0], args[1]); err != nil && !errors.Is(err, b2b.ErrSecretKey) {
				return err
			}
			ds, err := reg.Deliveries(cmd.Context(), args[0], args[1], limit)
			if err != nil {
				return err
			}
			if len(ds) == 0 {
				fmt.Fprintf(c.out, "no requests to %s b2b:%s logged\n", args[0], args[1])
				return nil
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TIME\tWEBHOOK-ID\tEVENTS\tSTATUS\tLATENCY\tRETRY\tERROR")
			for _, d := range ds {
				status := "-"
				if d.Status != 0 {
					status = strconv.Itoa(d.Status)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", d.At.UTC().Format(time.RFC3339), d.WebhookID, d.Events, status,
					d.Latency.Round(time.Microsecond), d.Retries, oneLine(d.Error, 120))
			}
			return w.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "how many attempts to show")
	return cmd
}

// oneLine returns s on one line, cut to at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// maxEventsText is the MAX EVENTS column of partners list.
func maxEventsText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}
