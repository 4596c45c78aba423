package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nearstore/nearstore/bench/btreebench"
	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/kv/btree"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/sandbox"
)

func newKVCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Key-value stores on a target: the NVMe KV command set (LEED), and BPF-KV",
		Long: `kv has two families of subcommands.

The NVMe Key Value command set, against a KV namespace (target serve
--kv-namespace, LEED's store at the target): "kv store", "kv retrieve",
"kv delete", "kv exist" and "kv list" each send one standard KV command.

BPF-KV, against an NVM namespace: "kv load" makes an offloadfs on
the namespace (with --mkfs) and bulk-loads a tree of synthetic entries: key i
is 2(i+1), its value the functions package's test pattern for the key.
"kv get" and "kv range" mount the file system read-only, so any number of
hosts can read while one owns it, and look keys up either by reading the
tree over NVMe/TCP (--mode plain) or with one pushdown per lookup (--mode
pushdown, the default).`,
	}
	cmd.AddCommand(newKVLoadCmd(g), newKVGetCmd(g), newKVRangeCmd(g), newKVPutCmd(g))
	cmd.AddCommand(kvCommandSetCmds(g)...) // kvcmd.go
	return cmd
}

// kvFlags are the flags every kv subcommand shares.
type kvFlags struct {
	conn
	dir, mode, rt string
	cache         int
	asJSON        bool
}

func (k *kvFlags) register(cmd *cobra.Command, lookups bool) {
	k.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&k.dir, "dir", "bpfkv", "the store's directory in the file system")
	if lookups {
		f.StringVar(&k.mode, "mode", "pushdown", "plain or pushdown")
		f.IntVar(&k.cache, "cache-levels", 0, "top levels of the tree cached on the host")
		f.BoolVar(&k.asJSON, "json", false, "print one JSON object: the entries and the round trips")
	}
	f.StringVar(&k.rt, "runtime", "ebpf", "btree_lookup's runtime at the target: ebpf or wasm")
}

// kvEntry is one key's result in get's and range's JSON.
type kvEntry struct {
	Key   uint64 `json:"key"`
	Found bool   `json:"found"`
	Value string `json:"value,omitempty"` // hex
}

// report prints a lookup's round trips: on stderr after the entries, or
// with them as one JSON object.
func (k *kvFlags) report(cmd *cobra.Command, mode btree.Mode, st btree.Stats, res []kvEntry) error {
	if !k.asJSON {
		_, err := fmt.Fprintf(cmd.ErrOrStderr(), "%d entries; %s: %d round trips (%d reads, %d pushdowns, %d fallbacks)\n",
			len(res), mode, st.Reads+st.Pushdowns, st.Reads, st.Pushdowns, st.Fallbacks)
		return err
	}
	if res == nil {
		res = []kvEntry{}
	}
	return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
		Mode       string    `json:"mode"`
		Entries    []kvEntry `json:"entries"`
		RoundTrips uint64    `json:"round_trips"`
		Reads      uint64    `json:"reads"`
		Pushdowns  uint64    `json:"pushdowns"`
		Fallbacks  uint64    `json:"fallbacks"`
	}{mode.String(), res, st.Reads + st.Pushdowns, st.Reads, st.Pushdowns, st.Fallbacks})
}

func (k *kvFlags) runtime() (sandbox.Kind, error) { return parseKind("--runtime", k.rt) }

// open connects, mounts (read-only unless rw) and opens the store. The
// returned close reports a failed commit of a read-write mount.
func (k *kvFlags) open(ctx context.Context, g *globals, rw bool) (*btree.Store, btree.Mode, func() error, error) {
	var mode btree.Mode
	if k.mode != "" {
		m, err := btree.ParseMode(k.mode)
		if err != nil {
			return nil, 0, nil, err
		}
		mode = m
	}
	rt, err := k.runtime()
	if err != nil {
		return nil, 0, nil, err
	}
	sess, err := fsMount(ctx, g, &k.conn, fsMountOpts{rw: rw})
	if err != nil {
		return nil, 0, nil, err
	}
	s, err := btree.Open(ctx, sess.fsys, k.dir, btree.Options{
		CacheLevels: k.cache, Pusher: btree.RawPusher{NS: sess.ns}, Loader: sess.ctrl, Runtime: rt, Logger: g.logger(),
	})
	if err != nil {
		return nil, 0, nil, errors.Join(err, sess.close())
	}
	return s, mode, func() error { return errors.Join(s.Close(), sess.close()) }, nil
}

func newKVLoadCmd(g *globals) *cobra.Command {
	var (
		k                 kvFlags
		keys              string
		fanout, valueSize int
		mkfs              bool
	)
	cmd := &cobra.Command{
		Use:     "load",
		Short:   "Bulk-load a tree of synthetic entries into the namespace's offloadfs",
		Example: `  nearstore kv load --addr 127.0.0.1:4420 --nqn nqn.2026-11.io.nearstore:vol1 --mkfs --keys 1M --fanout 15`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx := cmd.Context()
			n, err := parseCount(keys)
			if err != nil {
				return fmt.Errorf("--keys: %w", err)
			}
			rt, err := k.runtime()
			if err != nil {
				return err
			}
			if mkfs {
				ctrl, ns, err := k.conn.open(ctx, g, host.Options{})
				if err != nil {
					return err
				}
				err = offloadfs.Mkfs(ctx, ns, offloadfs.MkfsOptions{TakeOver: g.takeOver})
				ctrl.Close()
				if err != nil {
					return err
				}
			}
			sess, err := fsMount(ctx, g, &k.conn, fsMountOpts{rw: true, host: host.Options{QueueDepth: 32}})
			if err != nil {
				return err
			}
			defer func() {
				if cerr := sess.close(); err == nil {
					err = cerr // the commit: a load that did not land fails
				}
			}()
			fsys, ns, ctrl := sess.fsys, sess.ns, sess.ctrl
			p := mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40), mpb.WithRefreshRate(100*time.Millisecond))
			bar := p.AddBar(n, mpb.PrependDecorators(decor.Name("load "), decor.CountersNoUnit("%d / %d keys")),
				mpb.AppendDecorators(decor.Percentage(), decor.Name(" "), decor.EwmaETA(decor.ET_STYLE_GO, 30)))
			start := time.Now()
			s, err := btree.Create(ctx, fsys, k.dir, n, func(i int64, v []byte) (uint64, error) {
				key := btreebench.BTreeKey(i)
				btreebench.PutBTreeValue(v, key)
				return key, nil
			}, btree.Options{
				Fanout: fanout, ValueSize: valueSize, Pusher: btree.RawPusher{NS: ns}, Loader: ctrl, Runtime: rt, Logger: g.logger(),
				Progress: func(done, _ int64) { bar.EwmaSetCurrent(done, time.Since(start)) },
			})
			if err != nil {
				bar.Abort(false)
				p.Wait()
				return err
			}
			bar.SetTotal(n, true)
			p.Wait()
			defer func() {
				if cerr := s.Close(); err == nil {
					err = cerr
				}
			}()
			info := s.Info()
			fmt.Fprintf(cmd.OutOrStdout(), "loaded %d keys into %s in %.1fs: %d levels of fanout %d, %d-byte values (index %d bytes, values %d bytes); keys are 2, 4, …, %d\n",
				info.Keys, k.dir, time.Since(start).Seconds(), info.Depth, info.Fanout, info.ValueSize, info.IndexBytes, info.ValueBytes, btreebench.BTreeKey(n-1))
			return nil
		},
	}
	k.register(cmd, false)
	f := cmd.Flags()
	f.StringVar(&keys, "keys", "1M", "entries to load (1000000, 1MB = 10^6, 1M = 2^20, ...)")
	f.IntVar(&fanout, "fanout", btree.DefaultFanout, "most keys per node, 2 to 31")
	f.IntVar(&valueSize, "value-size", btree.DefaultValueSize, "value size in bytes")
	f.BoolVar(&mkfs, "mkfs", false, "make a new file system on the namespace first (destroys what is there)")
	return cmd
}

func newKVGetCmd(g *globals) *cobra.Command {
	var k kvFlags
	cmd := &cobra.Command{
		Use:     "get KEY...",
		Short:   "Look keys up; prints each value in hex",
		Example: `  nearstore kv get --addr 127.0.0.1:4420 --nqn nqn.2026-11.io.nearstore:vol1 --mode pushdown 2 4 5`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, mode, closeAll, err := k.open(ctx, g, false)
			if err != nil {
				return err
			}
			defer closeAll()
			out := cmd.OutOrStdout()
			var (
				missing int
				res     []kvEntry
			)
			for _, a := range args {
				key, err := strconv.ParseUint(a, 0, 64)
				if err != nil {
					return usageErrorf("key %q: %w", a, err)
				}
				v, err := s.Get(ctx, mode, key)
				switch {
				case errors.Is(err, btree.ErrNotFound):
					missing++
					res = append(res, kvEntry{Key: key})
					if !k.asJSON {
						fmt.Fprintf(out, "%d\tnot found\n", key)
					}
				case err != nil:
					return err
				default:
					res = append(res, kvEntry{Key: key, Found: true, Value: hex.EncodeToString(v)})
					if !k.asJSON {
						fmt.Fprintf(out, "%d\t%s\n", key, hex.EncodeToString(v))
					}
				}
			}
			if err := k.report(cmd, mode, s.Stats(), res); err != nil {
				return err
			}
			if missing > 0 {
				return fmt.Errorf("%d of %d keys not found", missing, len(args))
			}
			return nil
		},
	}
	k.register(cmd, true)
	return cmd
}

func newKVRangeCmd(g *globals) *cobra.Command {
	var (
		k     kvFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:     "range LO HI",
		Short:   "List the keys in [LO, HI] with their values",
		Example: `  nearstore kv range --addr 127.0.0.1:4420 --nqn nqn.2026-11.io.nearstore:vol1 --limit 10 1000 2000`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			lo, err := strconv.ParseUint(args[0], 0, 64)
			if err != nil {
				return usageErrorf("LO %q: %w", args[0], err)
			}
			hi, err := strconv.ParseUint(args[1], 0, 64)
			if err != nil {
				return usageErrorf("HI %q: %w", args[1], err)
			}
			s, mode, closeAll, err := k.open(ctx, g, false)
			if err != nil {
				return err
			}
			defer closeAll()
			out := cmd.OutOrStdout()
			var res []kvEntry
			err = s.Scan(ctx, mode, lo, hi, limit, func(key uint64, v []byte) error {
				res = append(res, kvEntry{Key: key, Found: true, Value: hex.EncodeToString(v)})
				if k.asJSON {
					return nil
				}
				_, err := fmt.Fprintf(out, "%d\t%s\n", key, hex.EncodeToString(v))
				return err
			})
			if err != nil {
				return err
			}
			return k.report(cmd, mode, s.Stats(), res)
		},
	}
	k.register(cmd, true)
	cmd.Flags().IntVar(&limit, "limit", 0, "most entries (0: all)")
	return cmd
}

func newKVPutCmd(g *globals) *cobra.Command {
	var (
		k     kvFlags
		isHex bool
	)
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Replace a key's value, durably",
		Long: `put replaces the value of a key the store holds, in place in the value
log, and syncs it before it exits. VALUE is text (or hex with --hex), at
most the store's value size; a shorter one is padded with zero bytes.
BPF-KV's tree is bulk-loaded and its nodes are fixed: a key it does not
hold cannot be added (load a new tree with kv load), and keys cannot be
deleted.`,
		Example: `  nearstore kv put 42 "new value"
  nearstore kv put --hex 42 00ff00ff`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			key, err := strconv.ParseUint(args[0], 0, 64)
			if err != nil {
				return usageErrorf("key %q: %w", args[0], err)
			}
			v := []byte(args[1])
			if isHex {
				if v, err = hex.DecodeString(args[1]); err != nil {
					return usageErrorf("value %q: %w", args[1], err)
				}
			}
			s, mode, closeAll, err := k.open(ctx, g, true)
			if err != nil {
				return err
			}
			defer func() {
				if cerr := closeAll(); err == nil {
					err = cerr // the commit: a put that did not land fails
				}
			}()
			size := s.Info().ValueSize
			if len(v) > size {
				return fmt.Errorf("a %d-byte value: the store's values are %d bytes", len(v), size)
			}
			v = append(v, make([]byte, size-len(v))...)
			err = s.Update(ctx, mode, key, v)
			if errors.Is(err, btree.ErrNotFound) {
				return fmt.Errorf("key %d is not in the store: BPF-KV's tree is bulk-loaded, so put replaces values and cannot add keys (kv load builds a new tree)", key)
			}
			if err != nil {
				return err
			}
			return s.Sync()
		},
	}
	k.register(cmd, true)
	cmd.Flags().BoolVar(&isHex, "hex", false, "VALUE is hex")
	return cmd
}
