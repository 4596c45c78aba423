package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
)

func newFuncCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "func", Short: "Load, list, unload and call storage functions on a target"}
	cmd.AddCommand(newFuncLoadCmd(g), newFuncListCmd(g), newFuncUnloadCmd(g), newFuncCallCmd(g))
	return cmd
}

func newFuncLoadCmd(g *globals) *cobra.Command {
	var c conn
	cmd := &cobra.Command{
		Use:   "load FILE",
		Short: "Load a wasm module or eBPF object; prints its function ID",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			module, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			ctrl, _, err := c.open(cmd.Context(), g, host.Options{})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			id, err := ctrl.LoadFunction(cmd.Context(), module)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
			return nil
		},
	}
	c.flags(cmd)
	return cmd
}

func newFuncListCmd(g *globals) *cobra.Command {
	var c conn
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the functions loaded on the target",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl, _, err := c.open(cmd.Context(), g, host.Options{})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			fs, err := ctrl.ListFunctions(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(fs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tENTRIES\tBYTES\tCALLS")
			for _, f := range fs {
				entries := ""
				if f.HasPushdown {
					entries += "pushdown "
				}
				if f.HasCompute {
					entries += "compute"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", f.ID, f.Kind, entries, f.Size, f.Calls)
			}
			return tw.Flush()
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newFuncUnloadCmd(g *globals) *cobra.Command {
	var c conn
	cmd := &cobra.Command{
		Use:   "unload ID",
		Short: "Unload a function",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := sandbox.ParseID(args[0])
			if err != nil {
				return err
			}
			ctrl, _, err := c.open(cmd.Context(), g, host.Options{})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			return ctrl.UnloadFunction(cmd.Context(), id)
		},
	}
	c.flags(cmd)
	return cmd
}

func newFuncCallCmd(g *globals) *cobra.Command {
	var (
		c                     conn
		mode                  string
		offset                uint64
		length                uint32
		params, data, outFile string
		outCap                int
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "call ID",
		Short: "Call a function on the namespace: pushdown, λ read or λ write",
		Long: `call runs a loaded function at the target against the raw namespace
(one file spanning it). --offset/--length name the start range. --params is
a file whose bytes are the initial scratch (pushdown) or the input's header
(λ read/write); --data is λ write's input. The result's output goes to --out
(or stdout as hex), its counters to stderr (or --json).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := sandbox.ParseID(args[0])
			if err != nil {
				return err
			}
			read := func(path string) ([]byte, error) {
				if path == "" {
					return nil, nil
				}
				return os.ReadFile(path)
			}
			p, err := read(params)
			if err != nil {
				return err
			}
			d, err := read(data)
			if err != nil {
				return err
			}
			ctrl, ns, err := c.open(cmd.Context(), g, host.Options{})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			files := []pushdown.File{ns.RawFile()}
			start := host.Start{Offset: offset, Length: length}
			var res pushdown.Result
			switch mode {
			case "pushdown":
				res, err = ns.Pushdown(cmd.Context(), id, files, start, p)
			case "lambda-read":
				res, err = ns.LambdaRead(cmd.Context(), id, files, start, p, outCap)
			case "lambda-write":
				var n int
				n, err = ns.LambdaWrite(cmd.Context(), id, files, start, p, d)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "wrote %d bytes at offset %d\n", n, offset)
				}
				return err
			default:
				return fmt.Errorf("--mode %q: want pushdown, lambda-read or lambda-write", mode)
			}
			var fe *host.FunctionError
			if errors.As(err, &fe) {
				return fmt.Errorf("the function returned error %d after %d reads", fe.Code, fe.Result.Reads)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
					Steps     uint32 `json:"steps"`
					Reads     uint32 `json:"reads"`
					BytesRead uint64 `json:"bytes_read"`
					Output    string `json:"output_hex"`
				}{res.Steps, res.Reads, res.BytesRead, hex.EncodeToString(res.Output)})
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "steps %d, reads at the target %d, bytes read %d, one command\n", res.Steps, res.Reads, res.BytesRead)
			var w io.Writer = cmd.OutOrStdout()
			if outFile != "" {
				return os.WriteFile(outFile, res.Output, 0o644)
			}
			_, err = fmt.Fprintln(w, hex.EncodeToString(res.Output))
			return err
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "pushdown", "pushdown, lambda-read or lambda-write")
	f.Uint64Var(&offset, "offset", 0, "start offset in bytes")
	f.Uint32Var(&length, "length", 512, "start length in bytes")
	f.StringVar(&params, "params", "", "file with the initial scratch / input header")
	f.StringVar(&data, "data", "", "file with λ write's input")
	f.StringVar(&outFile, "out", "", "write the output to this file")
	f.IntVar(&outCap, "out-cap", 64<<10, "λ read: largest output accepted (with the 32-byte header, within the target's MDTS)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
