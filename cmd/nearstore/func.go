package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/functions"
	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/nvme"
	"github.com/nearstore/nearstore/pushdown"
	"github.com/nearstore/nearstore/sandbox"
	"github.com/nearstore/nearstore/sandbox/ebpf"
	"github.com/nearstore/nearstore/sandbox/wasm"
	"github.com/nearstore/nearstore/volume"
)

func newFuncCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "func", Short: "Load, list, unload and call storage functions on a target"}
	cmd.AddCommand(newFuncLoadCmd(g), newFuncListCmd(g), newFuncUnloadCmd(g), newFuncCallCmd(g))
	return cmd
}

func newFuncLoadCmd(g *globals) *cobra.Command {
	var (
		c             conn
		kind, program string
	)
	cmd := &cobra.Command{
		Use:   "load FILE|NAME",
		Short: "Load a wasm module or eBPF object, or a standard function by name; prints its function ID",
		Long: `load sends a module to the target and prints its ID (the SHA-256 of the
module), which call and unload take, whole or as a unique prefix. FILE is a
wasm module or an eBPF object; NAME is one of the standard functions built
into nearstore (` + strings.Join(functions.Names(), ", ") + `), in the runtime --kind
says. call, list and unload know the standard functions by name too.`,
		Example: `  nearstore func load stats64
  nearstore func load --kind ebpf btree_lookup
  nearstore func load ./my_filter.wasm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			module, err := os.ReadFile(args[0])
			if errors.Is(err, os.ErrNotExist) && slices.Contains(functions.Names(), args[0]) {
				module, err = standardModule(args[0], kind)
			}
			if err != nil {
				return err
			}
			return c.with(cmd.Context(), g, host.Options{}, func(ctrl *host.Controller, _ *host.Namespace) error {
				id, err := ctrl.LoadProgram(cmd.Context(), module, program)
				if err != nil {
					return explainRefusal(cmd.Context(), module, program, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
				return nil
			})
		},
	}
	c.flags(cmd)
	cmd.Flags().StringVar(&kind, "kind", "wasm", "a standard function's runtime: wasm or ebpf")
	cmd.Flags().StringVar(&program, "program", "", "the program of an eBPF object holding several to load (its ID then differs from the object's)")
	return cmd
}

// explainRefusal adds the reason to a Function Load the target refused.
// A target with the Function Load Refusals log says why itself (the host
// library reads it: *host.RefusedError), and that is the answer. An older
// target answers a bare Function Rejected, so the module is loaded here,
// by the same runtime code the target runs, and that loader's error is the
// reason; if it accepts the module, the target's limits or version differ,
// and the message says so rather than guess.
func explainRefusal(ctx context.Context, module []byte, program string, err error) error {
	var re *host.RefusedError
	if errors.As(err, &re) {
		return err
	}
	var se *nvme.StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvme.StatusFunctionRejected {
		return err
	}
	kind, kerr := sandbox.DetectKind(module)
	if kerr != nil {
		return fmt.Errorf("%w: %v", err, kerr)
	}
	var rt sandbox.Runtime
	switch kind {
	case sandbox.KindEBPF:
		rt = ebpf.NewRuntime(ebpf.Options{Logger: slog.New(slog.DiscardHandler)})
	case sandbox.KindWasm:
		if rt, kerr = wasm.NewRuntime(ctx, wasm.Options{}); kerr != nil {
			return err
		}
	}
	defer rt.Close(ctx)
	var m sandbox.Module
	var lerr error
	if pl, ok := rt.(sandbox.ProgramLoader); ok && program != "" {
		m, lerr = pl.LoadProgram(ctx, module, program, sandbox.Limits{})
	} else {
		m, lerr = rt.Load(ctx, module, sandbox.Limits{})
	}
	if lerr == nil {
		_ = m.Close(ctx)
		return fmt.Errorf("%w\nthe %s runtime here accepts the module with default limits, so the target's limits or version differ; its log says why", err, kind)
	}
	return fmt.Errorf("%w\nthe %s loader here refuses it too: %v", err, kind, lerr)
}

func newFuncListCmd(g *globals) *cobra.Command {
	var c conn
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the functions loaded on the target",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.with(cmd.Context(), g, host.Options{}, func(ctrl *host.Controller, _ *host.Namespace) error {
				fs, err := ctrl.ListFunctions(cmd.Context())
				if err != nil {
					return err
				}
				return printFunctions(cmd.OutOrStdout(), fs, asJSON)
			})
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printFunctions prints "func list": a table, or JSON with asJSON.
func printFunctions(w io.Writer, fs []host.FunctionInfo, asJSON bool) error {
	names := standardNames()
	if asJSON {
		type entry struct {
			ID       string `json:"id"`
			Name     string `json:"name,omitempty"`
			Kind     string `json:"kind"`
			Pushdown bool   `json:"pushdown"`
			Compute  bool   `json:"compute"`
			Bytes    int    `json:"bytes"`
			Calls    uint64 `json:"calls"`
		}
		out := make([]entry, len(fs))
		for i, f := range fs {
			out[i] = entry{f.ID.String(), names[f.ID], f.Kind.String(), f.HasPushdown, f.HasCompute, f.Size, f.Calls}
		}
		return json.NewEncoder(w).Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKIND\tENTRIES\tBYTES\tCALLS")
	for _, f := range fs {
		entries := ""
		if f.HasPushdown {
			entries += "pushdown "
		}
		if f.HasCompute {
			entries += "compute"
		}
		name := names[f.ID]
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", f.ID, name, f.Kind, entries, f.Size, f.Calls)
	}
	return tw.Flush()
}

func newFuncUnloadCmd(g *globals) *cobra.Command {
	var c conn
	cmd := &cobra.Command{
		Use:   "unload ID",
		Short: "Unload a function (ID or a unique prefix of it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.with(cmd.Context(), g, host.Options{}, func(ctrl *host.Controller, _ *host.Namespace) error {
				fn, err := resolveFunction(cmd.Context(), ctrl, args[0])
				if err != nil {
					return err
				}
				return ctrl.UnloadFunction(cmd.Context(), fn.ID)
			})
		},
	}
	c.flags(cmd)
	return cmd
}

func newFuncCallCmd(g *globals) *cobra.Command {
	var (
		c                      conn
		mode, offsetS, lengthS string
		startFile              uint32
		params, data, outFile  string
		fileSpecs              []string
		outCap                 int
		asJSON, rawHex         bool
	)
	cmd := &cobra.Command{
		Use:   "call ID",
		Short: "Call a function on the namespace: pushdown, λ read or λ write",
		Long: `call runs a loaded function at the target. Its file table is the raw
namespace (one file spanning it), or the files --file names, in order, each
a run of the namespace's bytes: OFFSET:LENGTH, OFFSET a multiple of the
block size. --start-file, --offset and --length name the start range in
that table. --params is a file whose bytes are the initial scratch
(pushdown) or the input's header (λ read/write); --data is λ write's input.
The result's output goes to --out, or to stdout: decoded for the standard
functions whose output has a shape (stats64 and stats32: count, sum, min,
max; knn: distances; grep: the matching rows), as hex otherwise (or with
--hex). Its counters go to stderr, or with the output into --json.
ID is the function's ID, a unique prefix of it, or a standard function's
name.`,
		Example: `  nearstore func call $ID --mode lambda-read --offset 0 --length 4096 --out-cap 32
  nearstore func call $ID --file 0:1048576 --file 1048576:65536 --params scratch.bin --length 512`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			offset, err := volume.ParseSize(offsetS)
			if err != nil {
				return usageErrorf("--offset: %w", err)
			}
			length, err := volume.ParseSize(lengthS)
			if err != nil || length > math.MaxUint32 {
				return usageErrorf("--length %q: want a size up to 4GiB-1, e.g. 4096, 1MiB", lengthS)
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
			fn, err := resolveFunction(cmd.Context(), ctrl, args[0])
			if err != nil {
				return err
			}
			id := fn.ID
			files := []pushdown.File{ns.RawFile()}
			if len(fileSpecs) > 0 {
				if files, err = parseFiles(fileSpecs, ns.BlockSize()); err != nil {
					return err
				}
			}
			start := host.Start{File: startFile, Offset: uint64(offset), Length: uint32(length)}
			var (
				res     pushdown.Result
				written int
			)
			switch mode {
			case "pushdown":
				res, err = ns.Pushdown(cmd.Context(), id, files, start, p)
			case "lambda-read":
				res, err = ns.LambdaRead(cmd.Context(), id, files, start, p, outCap)
			case "lambda-write":
				written, err = ns.LambdaWrite(cmd.Context(), id, files, start, p, d)
			default:
				return usageErrorf("--mode %q: want pushdown, lambda-read or lambda-write", mode)
			}
			var (
				fe *host.FunctionError
				se *nvme.StatusError
			)
			switch {
			case errors.As(err, &se) && se.Status.Code() == nvme.StatusFunctionRejected && mode == "pushdown" && !fn.HasPushdown:
				return fmt.Errorf("%w\nfunction %s has no pushdown entry, only compute (a λ function): call it with --mode lambda-read or lambda-write", err, id)
			case errors.As(err, &se) && se.Status.Code() == nvme.StatusFunctionRejected && mode != "pushdown" && !fn.HasCompute:
				return fmt.Errorf("%w\nfunction %s has no compute entry, only pushdown: call it with --mode pushdown", err, id)
			case errors.As(err, &fe) && fe.Code == 0:
				return fmt.Errorf("the function failed without an error code (it trapped) after %d reads", fe.Result.Reads)
			case errors.As(err, &fe):
				return fmt.Errorf("the function returned error %d after %d reads", fe.Code, fe.Result.Reads)
			case err != nil:
				return err
			case mode == "lambda-write":
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %d bytes at offset %d of file %d\n", written, offset, startFile)
				return err
			}
			if outFile != "" {
				if err := os.WriteFile(outFile, res.Output, 0o644); err != nil {
					return err
				}
			}
			if asJSON {
				out := struct {
					Steps     uint32 `json:"steps"`
					Reads     uint32 `json:"reads"`
					BytesRead uint64 `json:"bytes_read"`
					Output    string `json:"output_hex,omitempty"`
					OutFile   string `json:"out,omitempty"`
					OutBytes  int    `json:"output_bytes"`
				}{Steps: res.Steps, Reads: res.Reads, BytesRead: res.BytesRead, OutFile: outFile, OutBytes: len(res.Output)}
				if outFile == "" {
					out.Output = hex.EncodeToString(res.Output)
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "steps %d, reads at the target %d, bytes read %d, one command\n", res.Steps, res.Reads, res.BytesRead)
			if outFile != "" {
				return nil
			}
			if text := decodeOutput(standardNames()[id], res.Output); text != "" && mode == "lambda-read" && !rawHex {
				_, err = fmt.Fprint(cmd.OutOrStdout(), text)
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), hex.EncodeToString(res.Output))
			return err
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "pushdown", "pushdown, lambda-read or lambda-write")
	f.StringArrayVar(&fileSpecs, "file", nil, "a file of the request's file table, OFFSET:LENGTH in bytes (repeatable; default: the whole namespace)")
	f.Uint32Var(&startFile, "start-file", 0, "the start range's file: an index into the file table")
	f.StringVar(&offsetS, "offset", "0", "start offset in the start file (4096, 1MiB, ...)")
	f.StringVar(&lengthS, "length", "512", "start length (512, 4k, 1MiB, ...)")
	f.StringVar(&params, "params", "", "file with the initial scratch / input header")
	f.StringVar(&data, "data", "", "file with λ write's input")
	f.StringVar(&outFile, "out", "", "write the output to this file")
	f.IntVar(&outCap, "out-cap", 64<<10, "λ read: largest output accepted (with the 32-byte header, within the target's MDTS)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&rawHex, "hex", false, "print a standard function's output as hex instead of decoded")
	return cmd
}

// resolveFunction finds the loaded function arg names: a whole ID, a
// prefix of one (as git takes a commit's), or a standard function's name,
// that only one loaded function has.
func resolveFunction(ctx context.Context, ctrl *host.Controller, arg string) (host.FunctionInfo, error) {
	fs, err := ctrl.ListFunctions(ctx)
	if err != nil {
		return host.FunctionInfo{}, err
	}
	names := standardNames()
	var match []host.FunctionInfo
	for _, f := range fs {
		if names[f.ID] == arg || strings.HasPrefix(f.ID.String(), strings.ToLower(arg)) {
			match = append(match, f)
		}
	}
	_, hexErr := hex.DecodeString(arg + strings.Repeat("0", len(arg)%2))
	switch {
	case arg == "":
		return host.FunctionInfo{}, usageErrorf("no function ID given")
	case len(match) == 1:
		return match[0], nil
	case hexErr != nil && !slices.Contains(functions.Names(), arg):
		return host.FunctionInfo{}, usageErrorf("%q is not a function ID (64 hex digits), a prefix of one, or a standard function's name (%s)",
			arg, strings.Join(functions.Names(), ", "))
	case len(match) == 0:
		return host.FunctionInfo{}, fmt.Errorf("function not found: no function %s is loaded on the target (func list shows what is)", arg)
	}
	ids := make([]string, len(match))
	for i, f := range match {
		ids[i] = f.Kind.String() + " " + f.ID.String()[:16] + "…"
	}
	if names[match[0].ID] == arg {
		return host.FunctionInfo{}, usageErrorf("%d loaded functions are %s (%s): give an ID, or enough of one", len(match), arg, strings.Join(ids, ", "))
	}
	return host.FunctionInfo{}, usageErrorf("%q is the start of %d functions' IDs (%s): give more of it", arg, len(match), strings.Join(ids, ", "))
}

// parseFiles turns --file specs (OFFSET:LENGTH, in bytes) into file-table
// entries: one extent each, on the raw namespace.
func parseFiles(specs []string, blockSize int) ([]pushdown.File, error) {
	files := make([]pushdown.File, 0, len(specs))
	bs := uint64(blockSize)
	for _, spec := range specs {
		o, l, ok := strings.Cut(spec, ":")
		off, err1 := strconv.ParseUint(o, 0, 64)
		n, err2 := strconv.ParseUint(l, 0, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("--file %q: want OFFSET:LENGTH in bytes", spec)
		}
		if off%bs != 0 {
			return nil, fmt.Errorf("--file %q: the offset is not a multiple of the block size %d", spec, bs)
		}
		blocks := (n + bs - 1) / bs
		if n == 0 || blocks > math.MaxUint32 {
			return nil, fmt.Errorf("--file %q: the length must be 1 byte to 2^32-1 blocks", spec)
		}
		files = append(files, pushdown.File{Size: n, Extents: []pushdown.Extent{{LBA: off / bs, Blocks: uint32(blocks)}}})
	}
	return files, nil
}
