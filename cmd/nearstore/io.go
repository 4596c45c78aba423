package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nearstore/nearstore/bench/blockio"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/iocheck"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/volume"
)

// target flags shared by the host-side commands.
type conn struct {
	addr, nqn string
	nsid      uint32
	digests   bool
	// hostNQN and hostID override the host's identity, which is
	// otherwise this machine's (host.SystemIdentity).
	hostNQN, hostID string
	// host is the host NQN open connected with ("" for a random one).
	host string
	// dhchapSecret and dhchapCtrlSecret are the DH-HMAC-CHAP secrets (or
	// @FILE) the host authenticates with.
	dhchapSecret, dhchapCtrlSecret string
}

// defaultNQN is the subsystem NQN target serve exports and the host
// commands connect to when none is given.
const defaultNQN = "nqn.2026-11.io.nearstore:vol1"

// envOr is the environment variable's value, or def if it is unset or
// empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (c *conn) flags(cmd *cobra.Command) { c.flagsTo(cmd.Flags(), "") }

// flagsTo adds the connection flags to f; with, if set, is when they
// apply, said in each help text (", with --fs-dir").
func (c *conn) flagsTo(f *pflag.FlagSet, with string) {
	f.StringVarP(&c.addr, "addr", "a", envOr("NEARSTORE_ADDR", "127.0.0.1:4420"), "target address"+with+" (host:port; default $NEARSTORE_ADDR)")
	f.StringVarP(&c.nqn, "nqn", "n", envOr("NEARSTORE_NQN", defaultNQN), "subsystem NQN"+with+" (default $NEARSTORE_NQN)")
	f.Uint32Var(&c.nsid, "nsid", 1, "namespace ID"+with)
	f.BoolVar(&c.digests, "digests", false, "request header and data digests (CRC32C)"+with)
	f.StringVar(&c.hostNQN, "hostnqn", "", "this host's NQN"+with+" (default: "+host.HostNQNFile+", else derived from /etc/machine-id)")
	f.StringVar(&c.hostID, "hostid", "", "this host's ID, a UUID"+with+" (default: "+host.HostIDFile+", else derived with the NQN)")
	c.authFlags(f)
}

// flagOrEnv is a flag's value, or the environment variable's if the flag
// was not given.
func flagOrEnv(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

// authFlags are the DH-HMAC-CHAP flags of every command that connects.
func (c *conn) authFlags(f *pflag.FlagSet) {
	// The environment is read when connecting, not as the flags'
	// defaults: --help would print the secrets.
	f.StringVar(&c.dhchapSecret, "dhchap-secret", "", "this host's DH-HMAC-CHAP secret, DHHC-1:... or @FILE (default $NEARSTORE_DHCHAP_SECRET)")
	f.StringVar(&c.dhchapCtrlSecret, "dhchap-ctrl-secret", "", "the controller's secret, for bidirectional authentication, DHHC-1:... or @FILE (default $NEARSTORE_DHCHAP_CTRL_SECRET)")
}

// identity fills opts' host identity: the flags', else this machine's.
// Every run of the CLI on a machine is then the same host to a target,
// so a host that crashed holding a file system takes it back by itself.
func (c *conn) identity(g *globals, opts *host.Options) error {
	for _, sf := range []struct {
		flag, v string
		dst     *string
	}{{"--dhchap-secret", flagOrEnv(c.dhchapSecret, "NEARSTORE_DHCHAP_SECRET"), &opts.DHCHAPSecret},
		{"--dhchap-ctrl-secret", flagOrEnv(c.dhchapCtrlSecret, "NEARSTORE_DHCHAP_CTRL_SECRET"), &opts.DHCHAPCtrlSecret}} {
		if sf.v == "" {
			continue
		}
		s, err := readSecret(sf.flag, sf.v)
		if err != nil {
			return err
		}
		*sf.dst = s
	}
	if c.hostID != "" {
		id, err := host.ParseHostID(c.hostID)
		if err != nil {
			return usageErrorf("--hostid: %w", err)
		}
		opts.HostID = id
	}
	if c.hostNQN != "" {
		opts.HostNQN = c.hostNQN
	}
	if opts.HostNQN != "" {
		return nil // the caller's or the flag's; the ID, if not given, is random
	}
	sys, err := host.SystemIdentity()
	if err != nil {
		// No stable identity to be had: every run a new host, as before.
		g.logger().Debug("no stable host identity; this run is a new host", "err", err)
		return nil
	}
	opts.HostNQN = sys.NQN
	if opts.HostID == ([16]byte{}) {
		opts.HostID = sys.ID
	}
	return nil
}

func (c *conn) open(ctx context.Context, g *globals, opts host.Options) (*host.Controller, *host.Namespace, error) {
	opts.HeaderDigest, opts.DataDigest = c.digests, c.digests
	opts.Logger = g.logger()
	if err := c.identity(g, &opts); err != nil {
		return nil, nil, err
	}
	c.host = opts.HostNQN
	ctrl, err := host.Connect(ctx, c.addr, c.nqn, opts)
	if errors.Is(err, &nvme.StatusError{Status: nvme.StatusConnectInvalidParameters}) {
		return nil, nil, c.noSubsystem(ctx, opts, err)
	}
	if err != nil {
		return nil, nil, err
	}
	ns, err := ctrl.Namespace(c.nsid)
	if err != nil {
		ctrl.Close()
		return nil, nil, err
	}
	return ctrl, ns, nil
}

// with connects, runs fn with the controller and the namespace, and
// disconnects.
func (c *conn) with(ctx context.Context, g *globals, opts host.Options, fn func(*host.Controller, *host.Namespace) error) error {
	ctrl, ns, err := c.open(ctx, g, opts)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	return fn(ctrl, ns)
}

// noSubsystem explains a Connect the target refused with Invalid
// Parameters, which is almost always a subsystem NQN it does not serve:
// it asks the discovery controller what it does serve.
func (c *conn) noSubsystem(ctx context.Context, opts host.Options, err error) error {
	entries, derr := host.Discover(ctx, c.addr, opts)
	if derr != nil {
		return fmt.Errorf("connecting to %s at %s: %w", c.nqn, c.addr, err)
	}
	var nqns []string
	for _, e := range entries {
		nqns = append(nqns, e.SubNQN)
	}
	if slices.Contains(nqns, c.nqn) {
		return fmt.Errorf("connecting to %s at %s: %w", c.nqn, c.addr, err)
	}
	if len(nqns) == 0 {
		return fmt.Errorf("no subsystem %s at %s; it serves none", c.nqn, c.addr)
	}
	return fmt.Errorf("no subsystem %s at %s; it serves: %s (--nqn)", c.nqn, c.addr, strings.Join(nqns, ", "))
}

func newDiscoverCmd(g *globals) *cobra.Command {
	var addr string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "List the subsystems a target's discovery controller reports",
		RunE: func(cmd *cobra.Command, _ []string) error {
			entries, err := host.Discover(cmd.Context(), addr, host.Options{Logger: g.logger()})
			if err != nil {
				return err
			}
			if asJSON {
				type entry struct {
					SubNQN  string `json:"subnqn"`
					TrType  string `json:"trtype"`
					AdrFam  uint8  `json:"adrfam"`
					SubType uint8  `json:"subtype"`
					TrAddr  string `json:"traddr"`
					TrSvcID string `json:"trsvcid"`
					PortID  uint16 `json:"portid"`
				}
				out := make([]entry, len(entries))
				for i, e := range entries {
					out[i] = entry{e.SubNQN, "tcp", e.AdrFam, e.SubType, e.TrAddr, e.TrSvcID, e.PortID}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SUBNQN\tTRADDR\tTRSVCID\tTRTYPE")
			for _, e := range entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\ttcp\n", e.SubNQN, e.TrAddr, e.TrSvcID)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&addr, "addr", "a", envOr("NEARSTORE_ADDR", "127.0.0.1:4420"), "target address (host:port; default $NEARSTORE_ADDR)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newIOCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "io", Short: "Check and measure a namespace's block I/O"}
	cmd.AddCommand(newVerifyCmd(g), newBenchIOCmd(g))
	return cmd
}

func newVerifyCmd(g *globals) *cobra.Command {
	var c conn
	var size string
	var asJSON, force bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Write patterns through every I/O path and read them back; exit 0 only if all match",
		Long: `verify overwrites the first --size bytes of the namespace with patterns
that encode their own offsets, through aligned and unaligned transfers, large
transfers that need R2T, Write Zeroes and Dataset Management deallocate, reads
everything back and compares it byte for byte. It refuses a --size larger
than the namespace, and a namespace that holds an offloadfs unless --force
is given, before writing anything.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := volume.ParseSize(size)
			if err != nil {
				return err
			}
			ctrl, ns, err := c.open(cmd.Context(), g, host.Options{IOQueues: 2})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			if err := checkOverwrite(cmd.Context(), &c, ns, n, force); err != nil {
				return err
			}
			rep := iocheck.Run(cmd.Context(), ns, iocheck.Options{Size: n})
			if err := printVerify(cmd.OutOrStdout(), rep, asJSON); err != nil {
				return err
			}
			return cmd.Context().Err()
		},
	}
	c.flags(cmd)
	cmd.Flags().StringVar(&size, "size", "64MiB", "bytes from the start of the namespace to check (overwritten)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite a namespace that holds an offloadfs (destroying it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON report")
	return cmd
}

// errVerifyFailed makes the process exit non-zero after the report printed.
var errVerifyFailed = errors.New("verify found mismatches")

func printVerify(w io.Writer, rep iocheck.Report, asJSON bool) error {
	if asJSON {
		if err := json.NewEncoder(w).Encode(rep); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range rep.Steps {
			res := "ok"
			if s.Err != "" {
				res = "FAIL: " + s.Err
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Duration.Round(time.Microsecond), res)
		}
		tw.Flush()
		switch {
		case rep.OK:
			fmt.Fprintf(w, "verify: all %d checks passed (seed %d)\n", len(rep.Steps), rep.Seed)
		case rep.Interrupted:
			fmt.Fprintf(w, "verify: interrupted after %d checks\n", len(rep.Steps))
		}
	}
	switch {
	case rep.Interrupted:
		return nil // the caller reports the interruption
	case !rep.OK:
		return errVerifyFailed
	}
	return nil
}

func newBenchIOCmd(g *globals) *cobra.Command {
	var c conn
	var cfg blockio.Config
	var bs, region string
	var asJSON, quiet, force bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure IOPS, bandwidth and latency of a namespace",
		Example: `  nearstore io bench --rw randread --bs 4k --qd 32 --queues 2 --duration 10s
  nearstore io bench --rw write --bs 128k --qd 8 --duration 5s --json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := volume.ParseSize(bs)
			if err != nil {
				return err
			}
			cfg.BlockSize = int(n)
			if region != "" {
				if cfg.Region, err = volume.ParseSize(region); err != nil {
					return err
				}
			}
			ctrl, ns, err := c.open(cmd.Context(), g, host.Options{IOQueues: cfg.Queues, QueueDepth: cfg.QueueDepth})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			if cfg.Pattern == "randwrite" || cfg.Pattern == "write" {
				region := cfg.Region
				if region == 0 {
					region = ns.Size()
				}
				if err := checkOverwrite(cmd.Context(), &c, ns, region, force); err != nil {
					return err
				}
			}
			endBar := func() {}
			if !quiet {
				cfg.Progress, endBar = rateBar("IOPS")(fmt.Sprintf("%s %s qd%d×%d", cfg.Pattern, bs, cfg.QueueDepth, cfg.Queues), cfg.Duration)
			}
			res, err := blockio.Run(cmd.Context(), ns, cfg)
			endBar()
			if errors.Is(err, context.Canceled) && res.Ops > 0 {
				// Interrupted: what it measured so far is still worth
				// printing; main turns the error into exit 130.
				if perr := printBlockIO(cmd.OutOrStdout(), []blockio.Result{res}, asJSON); perr != nil {
					return perr
				}
				return err
			}
			if err != nil {
				return err
			}
			return printBlockIO(cmd.OutOrStdout(), []blockio.Result{res}, asJSON)
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.Pattern, "rw", "randread", "randread, randwrite, read or write")
	f.StringVar(&bs, "bs", "4k", "transfer size")
	f.IntVar(&cfg.QueueDepth, "qd", 32, "commands in flight per queue")
	f.IntVar(&cfg.Queues, "queues", 1, "I/O queues (TCP connections)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run")
	f.StringVar(&region, "region", "", "bytes of the namespace to touch (default: all)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.BoolVar(&quiet, "quiet", false, "no live progress")
	f.BoolVar(&force, "force", false, "write to a namespace that holds an offloadfs (destroying it)")
	return cmd
}

// checkOverwrite is what a block-level command that writes the first n
// bytes of a namespace checks before writing anything: n fits, and the
// namespace holds no offloadfs unless force. With force, the file
// system's parked reservation is released so the writes get through
// (a live owner's is not: that still fails).
func checkOverwrite(ctx context.Context, c *conn, ns *host.Namespace, n int64, force bool) error {
	if n > ns.Size() {
		return fmt.Errorf("%s is more than namespace %d's %s; nothing was written",
			volume.FormatSize(n), c.nsid, volume.FormatSize(ns.Size()))
	}
	has, err := offloadfs.Detect(ns)
	switch {
	case err != nil:
		return err
	case !has:
		return nil
	case !force:
		return fmt.Errorf("namespace %d of %s holds an offloadfs, which writing would destroy; nothing was written (--force overwrites it)",
			c.nsid, c.nqn)
	}
	if err := offloadfs.Evict(ctx, ns, false); err != nil {
		return fmt.Errorf("freeing namespace %d for writing: %w", c.nsid, err)
	}
	return nil
}

func printBlockIO(w io.Writer, rs []blockio.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		if len(rs) == 1 {
			return enc.Encode(rs[0])
		}
		return enc.Encode(rs)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\trw\tbs\tqd\tqueues\tIOPS\tMB/s\tp50 µs\tp99 µs\tp99.9 µs\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", r.System, r.Pattern,
			volume.FormatSize(int64(r.BlockSize)), r.QueueDepth, r.Queues, r.IOPS, r.MBps, r.P50us, r.P99us, r.P999us)
	}
	return tw.Flush()
}
