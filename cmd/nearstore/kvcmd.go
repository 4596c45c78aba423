package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
)

// The NVMe Key Value command set's verbs (store, retrieve, delete, exist,
// list), against a KV namespace (target serve --kv-namespace). The other
// kv subcommands (load, get, range, put) are BPF-KV's, on an NVM
// namespace holding an offloadfs.

// kvSetFlags are the flags the KV command set's verbs share.
type kvSetFlags struct {
	conn
	isHex  bool
	asJSON bool
}

func (k *kvSetFlags) register(cmd *cobra.Command) {
	k.flags(cmd)
	cmd.Flags().BoolVar(&k.isHex, "hex", false, "keys (and values) are given and printed in hex")
}

// key parses a key argument: text, or hex with --hex; 1 to 16 bytes.
func (k *kvSetFlags) key(arg string) ([]byte, error) {
	b := []byte(arg)
	if k.isHex {
		var err error
		if b, err = hex.DecodeString(arg); err != nil {
			return nil, usageErrorf("key %q: %w", arg, err)
		}
	}
	if len(b) == 0 || len(b) > nvme.KVMaxKey {
		return nil, usageErrorf("key %q is %d bytes; the KV command set's keys are 1 to %d", arg, len(b), nvme.KVMaxKey)
	}
	return b, nil
}

func (k *kvSetFlags) show(b []byte) string {
	if k.isHex {
		return hex.EncodeToString(b)
	}
	return string(b)
}

// open connects and checks that the namespace speaks the KV command set.
func (k *kvSetFlags) open(cmd *cobra.Command, g *globals) (*host.Controller, *host.Namespace, error) {
	ctrl, ns, err := k.conn.open(cmd.Context(), g, host.Options{})
	if err != nil {
		return nil, nil, err
	}
	if !ns.IsKV() {
		ctrl.Close()
		return nil, nil, fmt.Errorf("namespace %d of %s is not a Key Value namespace (serve one with target serve --kv-namespace); for BPF-KV on an NVM namespace use kv load/get/range/put", k.nsid, k.nqn)
	}
	return ctrl, ns, nil
}

// kvKeyCommand completes cmd, a verb that takes one key (args[0]) and
// nothing else: it takes k's flags, and its run parses the key, connects,
// and calls run with the namespace.
func kvKeyCommand(g *globals, k *kvSetFlags, cmd *cobra.Command, run func(cmd *cobra.Command, arg string, ns *host.Namespace, key []byte) error) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		key, err := k.key(args[0])
		if err != nil {
			return err
		}
		ctrl, ns, err := k.open(cmd, g)
		if err != nil {
			return err
		}
		defer ctrl.Close()
		return run(cmd, args[0], ns, key)
	}
	k.register(cmd)
	return cmd
}

// kvStatusErr turns Key Does Not Exist into a message a script can tell
// apart (exit code 1).
func kvStatusErr(err error, key string) error {
	if errors.Is(err, &nvme.StatusError{Status: nvme.StatusKVKeyNotExist}) {
		return fmt.Errorf("key %q does not exist", key)
	}
	return err
}

func newKVStoreCmd(g *globals) *cobra.Command {
	var (
		k                  kvSetFlags
		mustExist, mustNot bool
		fromStdin          bool
	)
	cmd := &cobra.Command{
		Use:   "store KEY [VALUE]",
		Short: "KV command set: store a value under a key (Store, 01h)",
		Long: `store sends the NVMe KV command set's Store to a KV namespace. VALUE is
text (hex with --hex), or standard input with --stdin. A full store
answers Capacity Exceeded and keeps everything it held.`,
		Example: `  nearstore kv store user42 "hello"
  nearstore kv store --must-not-exist user43 "only if new"
  head -c 1024 /dev/urandom | nearstore kv store --stdin blob1`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := k.key(args[0])
			if err != nil {
				return err
			}
			var v []byte
			switch {
			case fromStdin && len(args) == 2:
				return usageErrorf("give VALUE or --stdin, not both")
			case fromStdin:
				if v, err = io.ReadAll(cmd.InOrStdin()); err != nil {
					return err
				}
			case len(args) == 2:
				v = []byte(args[1])
				if k.isHex {
					if v, err = hex.DecodeString(args[1]); err != nil {
						return usageErrorf("value: %w", err)
					}
				}
			default:
				return usageErrorf("give VALUE or --stdin")
			}
			if mustExist && mustNot {
				return usageErrorf("--must-exist and --must-not-exist exclude each other")
			}
			ctrl, ns, err := k.open(cmd, g)
			if err != nil {
				return err
			}
			defer ctrl.Close()
			err = ns.Store(cmd.Context(), key, v, host.KVStoreOptions{MustExist: mustExist, MustNotExist: mustNot})
			if err != nil {
				return kvStatusErr(err, args[0])
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored %d bytes under %s\n", len(v), args[0])
			return nil
		},
	}
	k.register(cmd)
	f := cmd.Flags()
	f.BoolVar(&mustExist, "must-exist", false, "store only if the key exists")
	f.BoolVar(&mustNot, "must-not-exist", false, "store only if the key does not exist")
	f.BoolVar(&fromStdin, "stdin", false, "read the value from standard input")
	return cmd
}

func newKVRetrieveCmd(g *globals) *cobra.Command {
	var k kvSetFlags
	var out string
	cmd := kvKeyCommand(g, &k, &cobra.Command{
		Use:   "retrieve KEY",
		Short: "KV command set: print a key's value (Retrieve, 02h)",
		Example: `  nearstore kv retrieve user42
  nearstore kv retrieve -o blob1.bin blob1`,
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, arg string, ns *host.Namespace, key []byte) error {
		v, err := ns.Retrieve(cmd.Context(), key)
		if err != nil {
			return kvStatusErr(err, arg)
		}
		if out != "" {
			return os.WriteFile(out, v, 0o644)
		}
		if k.isHex {
			fmt.Fprintln(cmd.OutOrStdout(), hex.EncodeToString(v))
			return nil
		}
		_, err = cmd.OutOrStdout().Write(v)
		return err
	})
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the value to this file instead of standard output")
	return cmd
}

func newKVDeleteCmd(g *globals) *cobra.Command {
	var k kvSetFlags
	return kvKeyCommand(g, &k, &cobra.Command{
		Use:     "delete KEY",
		Short:   "KV command set: delete a key (Delete, 10h)",
		Example: `  nearstore kv delete user42`,
		Args:    cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, arg string, ns *host.Namespace, key []byte) error {
		if err := ns.Delete(cmd.Context(), key); err != nil {
			return kvStatusErr(err, arg)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", arg)
		return nil
	})
}

func newKVExistCmd(g *globals) *cobra.Command {
	var k kvSetFlags
	return kvKeyCommand(g, &k, &cobra.Command{
		Use:     "exist KEY",
		Short:   "KV command set: does a key exist? (Exist, 14h; exit 0 yes, 1 no)",
		Example: `  nearstore kv exist user42 && echo present`,
		Args:    cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, arg string, ns *host.Namespace, key []byte) error {
		ok, err := ns.Exist(cmd.Context(), key)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("key %q does not exist", arg)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s exists\n", arg)
		return nil
	})
}

func newKVListCmd(g *globals) *cobra.Command {
	var k kvSetFlags
	var limit int
	cmd := &cobra.Command{
		Use:   "list [START]",
		Short: "KV command set: list keys from START on (List, 06h), in the target's order",
		Long: `list prints the namespace's keys, one a line, from START (or the first)
on, as many as --limit (0: all). The order is the store's: LEED's is by
hash segment, then by key, so START is a position, not a prefix.`,
		Example: `  nearstore kv list
  nearstore kv list --json --limit 100`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var start []byte
			if len(args) == 1 {
				var err error
				if start, err = k.key(args[0]); err != nil {
					return err
				}
			}
			ctrl, ns, err := k.open(cmd, g)
			if err != nil {
				return err
			}
			defer ctrl.Close()
			var all []string
			first := true
			for limit == 0 || len(all) < limit {
				keys, err := ns.List(cmd.Context(), start, 64<<10)
				if err != nil {
					return err
				}
				if !first && len(keys) > 0 {
					keys = keys[1:] // start itself, listed last time
				}
				if len(keys) == 0 {
					break
				}
				first = false
				for _, key := range keys {
					if limit > 0 && len(all) == limit {
						break
					}
					all = append(all, k.show(key))
				}
				start = keys[len(keys)-1]
			}
			if k.asJSON {
				if all == nil {
					all = []string{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"keys": all})
			}
			for _, s := range all {
				fmt.Fprintln(cmd.OutOrStdout(), s)
			}
			return nil
		},
	}
	k.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many keys (0: all)")
	cmd.Flags().BoolVar(&k.asJSON, "json", false, "print one JSON object {\"keys\": [...]}")
	return cmd
}

// kvCommandSetCmds are the KV command set's verbs, registered under kv.
func kvCommandSetCmds(g *globals) []*cobra.Command {
	return []*cobra.Command{newKVStoreCmd(g), newKVRetrieveCmd(g), newKVDeleteCmd(g), newKVExistCmd(g), newKVListCmd(g)}
}
