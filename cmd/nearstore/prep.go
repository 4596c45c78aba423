package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offload"
	"github.com/nearstore/nearstore/offload/prep"
	"github.com/nearstore/nearstore/offloadfs"
)

func newPrepCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prep",
		Short: "OffloadPrep: image preprocessing on the host, the storage node, a peer, or split",
		Long: `prep runs an image preprocessing pipeline (decode JPEG or PNG, random
resized crop, horizontal flip, rotation, normalise to a float32 CHW tensor)
over images in an offloadfs, on this host or as offload tasks on engines,
and returns the tensors here. Each image's random draws come from --seed
and its index, so every placement gives the same tensors.`,
	}
	cmd.AddCommand(newPrepDatasetCmd(g), newPrepRunCmd(g))
	return cmd
}

func newPrepDatasetCmd(g *globals) *cobra.Command {
	var (
		dir, from   string
		count, seed int
	)
	cmd := fsCommand(g, true, &cobra.Command{
		Use:   "dataset",
		Short: "Write a synthetic ImageNet-like image set into the file system, or import a local directory",
		Example: `  nearstore prep dataset --dir /imagenet --count 2000
  nearstore prep dataset --dir /photos --from ~/Pictures`,
		Args: cobra.NoArgs,
	}, func(cmd *cobra.Command, _ []string, fsys *offloadfs.FS) error {
		start := time.Now()
		if from != "" {
			n, err := prep.Import(cmd.Context(), fsys, dir, from)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "imported %d images into %s in %v\n", n, fsPath(dir), time.Since(start).Round(time.Millisecond))
			return nil
		}
		if err := prep.Generate(cmd.Context(), fsys, dir, count, uint64(seed), nil); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "wrote %d synthetic images into %s in %v\n", count, fsPath(dir), time.Since(start).Round(time.Millisecond))
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "/prep", "directory in the file system")
	f.StringVar(&from, "from", "", "import the JPEG and PNG files of this local directory instead")
	f.IntVar(&count, "count", 2000, "synthetic images to write")
	f.IntVar(&seed, "seed", 1, "seed of the synthetic images")
	return cmd
}

// prepReport is prep run's --json.
type prepReport struct {
	Where     string         `json:"where"`
	Images    int            `json:"images"`
	Seconds   float64        `json:"seconds"`
	PerSecond float64        `json:"images_per_second"`
	Ran       map[string]int `json:"ran"`
	// Digest is SHA-256 over every tensor in index order: equal digests
	// mean equal tensors, wherever they were made.
	Digest string `json:"digest"`
}

func newPrepRunCmd(g *globals) *cobra.Command {
	var (
		c            conn
		dir, where   string
		engines      []string
		size, seed   int
		batch, limit int
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Preprocess the images of a directory and report images per second",
		Long: `run preprocesses every image in --dir and reports how fast, where each
went, and a digest of all the tensors (the same wherever they were made).
--where host runs here; engine sends every batch to the --engine engines;
split has this host and the engines take batches as they are free.`,
		Example: `  nearstore prep run --dir /imagenet --where host
  nearstore prep run --dir /imagenet --where engine --engine 127.0.0.1:7420
  nearstore prep run --dir /imagenet --where split --engine 127.0.0.1:7420 --engine 10.0.0.3:7421`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			useHost := where == "host" || where == "split"
			if where != "host" && where != "engine" && where != "split" {
				return usageErrorf("--where %q: want host, engine or split", where)
			}
			if !useHost || where == "split" {
				if len(engines) == 0 {
					return usageErrorf("--where %s needs at least one --engine", where)
				}
			} else {
				engines = nil
			}
			sess, err := fsMount(ctx, g, &c, fsMountOpts{rw: true, remote: true, host: host.Options{IOQueues: 2}})
			if err != nil {
				return err
			}
			defer sess.close()
			fsys := sess.fsys
			names, err := prep.List(fsys, dir)
			if err != nil {
				return fsDescribe(err)
			}
			if limit > 0 && len(names) > limit {
				names = names[:limit]
			}
			if len(names) == 0 {
				return fmt.Errorf("no JPEG or PNG images in %s (make some with nearstore prep dataset)", fsPath(dir))
			}
			local, err := localEngine(sess.ns, g.logger())
			if err != nil {
				return err
			}
			defer local.Close()
			var engs []prep.Engine
			for _, a := range engines {
				cl, err := offload.Dial(a, offload.ClientOptions{Local: local})
				if err != nil {
					return err
				}
				defer cl.Close()
				engs = append(engs, prep.Engine{Name: a, Peer: cl})
			}
			r := &prep.Runner{FS: fsys, Options: prep.Options{Size: size}, Seed: uint64(seed), Batch: batch}
			digests := make([][32]byte, len(names))
			start := time.Now()
			st, err := r.Run(ctx, names, 0, useHost, engs, func(i uint64, t []float32) {
				b := make([]byte, 4*len(t))
				for j, f := range t {
					binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
				}
				digests[i] = sha256.Sum256(b)
			})
			if err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			h := sha256.New()
			for _, d := range digests {
				h.Write(d[:])
			}
			rep := prepReport{Where: where, Images: len(names), Seconds: secs, PerSecond: float64(len(names)) / secs, Ran: st.Images, Digest: hex.EncodeToString(h.Sum(nil))}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			var ran []string
			for k, v := range st.Images {
				ran = append(ran, fmt.Sprintf("%s %d", k, v))
			}
			slices.Sort(ran)
			fmt.Fprintf(cmd.OutOrStdout(), "%d images in %.2fs: %.1f images/s (%s)\ntensors digest %s\n",
				rep.Images, secs, rep.PerSecond, strings.Join(ran, ", "), rep.Digest)
			return nil
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "/prep", "directory of images in the file system")
	f.StringVar(&where, "where", "host", "host, engine, or split")
	f.StringArrayVar(&engines, "engine", nil, "an offload engine's address (repeat)")
	f.IntVar(&size, "size", 224, "output side in pixels")
	f.IntVar(&seed, "seed", 1, "seed of the random draws")
	f.IntVar(&batch, "batch", 8, "images per offloaded task")
	f.IntVar(&limit, "limit", 0, "only the first N images (0: all)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
