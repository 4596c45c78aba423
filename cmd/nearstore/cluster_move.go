package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/cluster"
	"github.com/nearstore/nearstore/kv/chain"
)

// parseKeyArg reads a key given as in Go's quoting without the quotes
// ("\x80" is the byte 0x80), as "cluster status" prints shard bounds.
func parseKeyArg(s string) ([]byte, error) {
	k, err := strconv.Unquote(`"` + s + `"`)
	if err != nil {
		return nil, usageErrorf("key %q: %v (use Go escapes, e.g. \\x80)", s, err)
	}
	return []byte(k), nil
}

func newClusterMoveCmd() *cobra.Command {
	var (
		ef       etcdFlags
		to       string
		timeout  time.Duration
		startArg string
		endArg   string
		abort    bool
	)
	cmd := &cobra.Command{
		Use:   "move --start KEY [--end KEY] --to GROUP",
		Short: "Move the key range [START, END) to GROUP: COPY it there, then switch the shard map in etcd",
		Long: `move moves the keys in [--start, --end) (no --end: to the end of the key
space) from the group holding them to --to (docs/CLUSTER.md, "Moving a range"):
the range is frozen in the shard map, every node acknowledges, the range is
copied from the old group's tail through the new group's chain, the map
switches to the new group, and the range thaws. Client writes to the range
wait for the move and then go to the new group. Keys take Go escapes
("\x80"), as "cluster status" prints them. It prints one line:
"moved [START, END) FROM -> TO: N keys copied, M cleared, frozen D".
A move left unfinished (its process died: the range stays frozen) is
resumed by running the same command again, or, before its switch, undone
with --abort.`,
		Example: `  nearstore cluster move --etcd http://127.0.0.1:2379 --start '\x40' --end '\x80' --to g1`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if abort {
				return ef.withControl(cmd.Context(), 0, func(ctx context.Context, ctl *cluster.Control) error {
					m, err := chain.AbortMove(ctx, ctl)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "aborted: shard map version %d\n", m.Version)
					return nil
				})
			}
			if to == "" || !cmd.Flags().Changed("start") {
				return usageErrorf("--start and --to are required")
			}
			start, err := parseKeyArg(startArg)
			if err != nil {
				return err
			}
			var end []byte
			if cmd.Flags().Changed("end") {
				if end, err = parseKeyArg(endArg); err != nil {
					return err
				}
			}
			return ef.withControl(cmd.Context(), timeout, func(ctx context.Context, ctl *cluster.Control) error {
				st, err := chain.MoveRange(ctx, chain.MoveConfig{Control: ctl, Start: start, End: end, To: to})
				if err != nil {
					return err
				}
				printMove(cmd, start, end, st, to)
				return nil
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().StringVar(&startArg, "start", "", "first key of the range (required; \"\" is the start of the key space)")
	cmd.Flags().StringVar(&endArg, "end", "", "key past the range (default: the end of the key space)")
	cmd.Flags().StringVar(&to, "to", "", "group to move the range to (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up (undoing the move if it has not switched) after this long (0: never)")
	cmd.Flags().BoolVar(&abort, "abort", false, "undo the unfinished move that has not switched (no other flag needed)")
	return cmd
}

func printMove(cmd *cobra.Command, start, end []byte, st chain.MoveStats, to string) {
	e := "∞"
	if end != nil {
		e = strconv.Quote(string(end))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "moved [%q, %s) %s -> %s: %d keys copied, %d cleared, frozen %v\n",
		start, e, st.From, to, st.Copied, st.Cleared, st.Frozen.Round(time.Millisecond))
}

func newClusterBalanceCmd() *cobra.Command {
	var (
		ef      etcdFlags
		cfg     chain.BalanceConfig
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "balance",
		Short: "Write-imbalance handling, once: measure each group's writes, move a range from the busiest to the idlest",
		Long: `balance counts each shard's client writes for --window (from the counters
every node publishes in etcd), and if the busiest group took at least
--min-writes and --ratio times the idlest group's, moves that group's busiest
shard (or its upper half, if moving it whole would not narrow the gap) to the
idlest group, as "cluster move" does. It prints each group's writes, then
"moved ..." or "balanced: no move".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ef.withControl(cmd.Context(), timeout, func(ctx context.Context, ctl *cluster.Control) error {
				cfg.Control = ctl
				p, moved, st, err := chain.Balance(ctx, cfg)
				for _, g := range slices.Sorted(maps.Keys(p.Load)) {
					fmt.Fprintf(cmd.OutOrStdout(), "group %s writes %.0f\n", g, p.Load[g])
				}
				if err != nil {
					return err
				}
				if !moved {
					fmt.Fprintln(cmd.OutOrStdout(), "balanced: no move")
					return nil
				}
				printMove(cmd, p.Start, p.End, st, p.To)
				return nil
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().DurationVar(&cfg.Window, "window", 5*time.Second, "how long to count writes")
	cmd.Flags().Float64Var(&cfg.Ratio, "ratio", 2, "move when the busiest group took this many times the idlest's writes")
	cmd.Flags().Float64Var(&cfg.MinWrites, "min-writes", 100, "and at least this many writes in the window")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long (0: never)")
	return cmd
}

// shardFlags describes a shard's move state for "cluster status".
func shardFlags(s cluster.Shard) string {
	switch {
	case s.MovingTo != "":
		return " (frozen, moving to " + s.MovingTo + ")"
	case s.Frozen:
		return " (frozen)"
	}
	return ""
}
