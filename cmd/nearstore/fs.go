package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/internal/ctxio"
	"github.com/nearstore/nearstore/offloadfs"
	"github.com/nearstore/nearstore/offloadfs/fusefs"
	"github.com/nearstore/nearstore/volume"
)

// newFSCmd is the offloadfs command group (nearstore fs ...).
func newFSCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Make, inspect and mount an offloadfs file system on a remote namespace",
		Long: `fs drives an offloadfs on a namespace of a running target. Commands that
change the file system (mkfs, put, rm, mkdir, mv, mount) mount it read-write
and commit before they exit; the others mount the committed state read-only,
so they can run while another host owns it (they see what it last
committed). Only one host may own a file system at a time, and the target
enforces it: a read-write mount holds an NVMe reservation on the namespace,
so a changing command run while another host (or another "fs mount") owns
it fails with "another host owns the file system". If that owner died
without unmounting, --take-over preempts it. A preempted owner that is
still alive is fenced for good: the target refuses its writes, its commits
fail ("this mount is fenced"), and a FUSE mount of it turns read-only until
it is unmounted and mounted again; nothing it does afterwards can
overwrite the new owner's changes.

Paths inside the file system are slash-separated from its root; a leading
slash is optional.`,
		Example: `  nearstore fs mkfs --addr 10.0.0.2:4420 --nqn nqn.2026-11.io.nearstore:vol1
  nearstore fs put photo.jpg /pics/ --addr 10.0.0.2:4420 --nqn nqn.2026-11.io.nearstore:vol1
  nearstore fs mount /mnt/vol1 --addr 10.0.0.2:4420 --nqn nqn.2026-11.io.nearstore:vol1`,
	}
	cmd.PersistentFlags().BoolVar(&g.takeOver, "take-over", false,
		"mounting read-write, preempt another host's ownership (only if that owner is dead)")
	cmd.AddCommand(newFSMkfsCmd(g), newFSLsCmd(g), newFSPutCmd(g), newFSGetCmd(g), newFSCatCmd(g),
		newFSRmCmd(g), newFSMkdirCmd(g), newFSMvCmd(g), newFSStatCmd(g), newFSFsckCmd(g), newFSDfCmd(g),
		newFSMountCmd(g))
	return cmd
}

// fsCopyBuf is the transfer unit of put, get and cat: offloadfs passes
// file I/O straight to the namespace, so large transfers mean few round
// trips.
const fsCopyBuf = 1 << 20

// fsSession is a connected, mounted file system.
type fsSession struct {
	ctrl   *host.Controller
	ns     *host.Namespace
	fsys   *offloadfs.FS
	unlock func() // a read-write mount's local lock (lockLocalOwner)
	closed bool
}

// fsMountOpts are what the commands vary of a mount.
type fsMountOpts struct {
	rw bool
	// remote makes the namespace the file system's Remote too, for the
	// commands that send work to the target (offload run, prep run).
	remote  bool
	host    host.Options
	metrics *offloadfs.Metrics // nil: none
}

// fsMount connects and mounts the file system, read-only unless o.rw.
func fsMount(ctx context.Context, g *globals, c *conn, o fsMountOpts) (*fsSession, error) {
	ctrl, ns, err := c.open(ctx, g, o.host)
	if err != nil {
		return nil, err
	}
	unlock := func() {}
	if o.rw {
		if unlock, err = lockLocalOwner(c, ns); err != nil {
			ctrl.Close()
			return nil, err
		}
	}
	opts := offloadfs.Options{Logger: g.logger(), ReadOnly: !o.rw, TakeOver: g.takeOver, Metrics: o.metrics}
	if o.remote {
		opts.Remote = ns
	}
	fsys, err := offloadfs.Mount(ctx, ns, opts)
	if err != nil {
		unlock()
		ctrl.Close()
		if errors.Is(err, offloadfs.ErrOwned) {
			return nil, fmt.Errorf("%w (read-only commands still work; if the owner is dead, add --take-over)", err)
		}
		if errors.Is(err, offloadfs.ErrNotFormatted) {
			return nil, fmt.Errorf("namespace %d of %s at %s holds no offloadfs (make one with `nearstore fs mkfs`): %w",
				c.nsid, c.nqn, c.addr, err)
		}
		return nil, fmt.Errorf("mount offloadfs on namespace %d of %s: %w", c.nsid, c.nqn, err)
	}
	return &fsSession{ctrl: ctrl, ns: ns, fsys: fsys, unlock: unlock}, nil
}

// close unmounts (committing a read-write mount) and disconnects; closing
// again does nothing.
func (s *fsSession) close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.fsys.Close()
	s.ctrl.Close()
	s.unlock()
	if err != nil {
		return fmt.Errorf("unmount (commit): %w", err)
	}
	return nil
}

// fsWith runs fn on the mounted file system and unmounts; a failed
// commit fails the command even if fn succeeded.
func fsWith(cmd *cobra.Command, g *globals, c *conn, rw bool, fn func(fsys *offloadfs.FS) error) (err error) {
	s, err := fsMount(cmd.Context(), g, c, fsMountOpts{rw: rw})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.close(); err == nil {
			err = cerr
		}
	}()
	return fsDescribe(fn(s.fsys))
}

// fsCommand completes cmd, an fs subcommand that works on the file
// system: it takes the connection flags, and its run mounts the file
// system (read-write if rw), calls run, and commits (if rw) and unmounts,
// as fsWith does.
func fsCommand(g *globals, rw bool, cmd *cobra.Command, run func(cmd *cobra.Command, args []string, fsys *offloadfs.FS) error) *cobra.Command {
	var c conn
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return fsWith(cmd, g, &c, rw, func(fsys *offloadfs.FS) error { return run(cmd, args, fsys) })
	}
	c.flags(cmd)
	return cmd
}

// fsPath is the absolute form of a path in the file system.
func fsPath(p string) string { return path.Clean("/" + p) }

// fsCLIError keeps an error's identity (errors.Is) under a message a
// person reads more easily than the wrapped chain.
type fsCLIError struct {
	msg string
	err error
}

func (e *fsCLIError) Error() string { return e.msg }
func (e *fsCLIError) Unwrap() error { return e.err }

// fsDescribe rewrites the errors people meet every day ("open /x:
// offloadfs: is a directory") into the words ls and cp use ("open /x: is
// a directory"). Other errors pass unchanged.
func fsDescribe(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, offloadfs.ErrFenced) {
		return err // its own words say what happened and what to do
	}
	var reason string
	switch e := fusefs.Errno(err); e {
	case syscall.ENOENT, syscall.EEXIST, syscall.ENOTDIR, syscall.EISDIR, syscall.ENOTEMPTY,
		syscall.ENOSPC, syscall.ENAMETOOLONG, syscall.EROFS:
		reason = e.Error()
	default:
		return err
	}
	var (
		pe *iofs.PathError
		le *os.LinkError
	)
	switch {
	case errors.As(err, &le):
		return &fsCLIError{fmt.Sprintf("%s %s %s: %s", le.Op, fsPath(le.Old), fsPath(le.New), reason), err}
	case errors.As(err, &pe):
		return &fsCLIError{fmt.Sprintf("%s %s: %s", pe.Op, fsPath(pe.Path), reason), err}
	}
	return err
}

// fsErrorf is an error about a path in the file system, matching errno.
func fsErrorf(errno syscall.Errno, op, p string) error {
	return &fsCLIError{fmt.Sprintf("%s %s: %s", op, fsPath(p), errno.Error()), errno}
}

func newFSMkfsCmd(g *globals) *cobra.Command {
	var (
		c             conn
		blockSize     string
		inodes        uint64
		journalBlocks uint64
		force         bool
	)
	cmd := &cobra.Command{
		Use:   "mkfs",
		Short: "Make a new, empty offloadfs on the namespace",
		Long: `mkfs writes a new offloadfs over the whole namespace. It refuses a namespace
that already holds one (or the remains of one) unless --force is given:
everything on it is lost.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var opts offloadfs.MkfsOptions
			if blockSize != "" {
				n, err := volume.ParseSize(blockSize)
				if err != nil {
					return fmt.Errorf("--block-size: %w", err)
				}
				opts.BlockSize = int(n)
			}
			opts.Inodes, opts.JournalBlocks, opts.TakeOver = inodes, journalBlocks, g.takeOver
			ctrl, ns, err := c.open(ctx, g, host.Options{})
			if err != nil {
				return err
			}
			defer ctrl.Close()
			quiet := offloadfs.Options{Logger: slog.New(slog.DiscardHandler)}
			old, err := offloadfs.MountReadOnly(ctx, ns, quiet)
			switch {
			case err == nil:
				u := old.Usage()
				old.Close()
				if !force {
					return fmt.Errorf("namespace %d already holds an offloadfs (%d of %d inodes in use); --force destroys it",
						c.nsid, u.Inodes-u.FreeInodes, u.Inodes)
				}
			case errors.Is(err, offloadfs.ErrNotFormatted):
			case errors.Is(err, offloadfs.ErrCorrupt):
				if !force {
					return fmt.Errorf("namespace %d holds a damaged offloadfs (%w); --force reformats it", c.nsid, err)
				}
			default:
				return err
			}
			if err := offloadfs.Mkfs(ctx, ns, opts); err != nil {
				return err
			}
			fsys, err := offloadfs.MountReadOnly(ctx, ns, quiet)
			if err != nil {
				return fmt.Errorf("mkfs wrote a file system that does not mount: %w", err)
			}
			u := fsys.Usage()
			fsys.Close()
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "offloadfs on namespace %d of %s: %s blocks, %s for data, %d inodes, %s journal\n",
				c.nsid, c.nqn, volume.FormatSize(int64(u.BlockSize)), volume.FormatSize(int64(u.Blocks)*int64(u.BlockSize)),
				u.Inodes, volume.FormatSize(int64(u.JournalSize)))
			return err
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&blockSize, "block-size", "", "allocation unit: a power of two from 512 to 64KiB (default 4KiB)")
	f.Uint64Var(&inodes, "inodes", 0, "number of files and directories it can hold (default one per 64 KiB)")
	f.Uint64Var(&journalBlocks, "journal-blocks", 0, "journal size in blocks (default: the minimum, at least 256)")
	f.BoolVar(&force, "force", false, "overwrite an existing file system")
	return cmd
}

// fsEntry describes a file or directory for ls and stat.
type fsEntry struct {
	Path     string    `json:"path"`
	Type     string    `json:"type"`
	Size     int64     `json:"size"`
	Inode    uint64    `json:"inode"`
	Version  uint64    `json:"version"`
	Modified time.Time `json:"modified"`
}

func newFSEntry(p string, fi iofs.FileInfo) fsEntry {
	e := fsEntry{Path: p, Type: "file", Size: fi.Size(), Modified: fi.ModTime()}
	if fi.IsDir() {
		e.Type = "dir"
	}
	if ofi, ok := fi.Sys().(*offloadfs.FileInfo); ok {
		e.Inode, e.Version = ofi.Ino(), ofi.Version()
	}
	return e
}

// name is the entry's path as ls shows it: directories end in a slash.
func (e fsEntry) name() string {
	if e.Type == "dir" && !strings.HasSuffix(e.Path, "/") {
		return e.Path + "/"
	}
	return e.Path
}

func newFSLsCmd(g *globals) *cobra.Command {
	var long, recurse, human, asJSON bool
	cmd := fsCommand(g, false, &cobra.Command{
		Use:   "ls [PATH]",
		Short: "List a directory (default: the root)",
		Long: `ls lists a directory's entries by name, directories with a trailing slash;
a file lists itself. -l adds the type and size, the inode and its
extent-map version, and the modification time. -R lists the whole tree
below PATH, one path (relative to PATH) a line, depth first in name order.`,
		Args: cobra.MaximumNArgs(1),
	}, func(cmd *cobra.Command, args []string, fsys *offloadfs.FS) error {
		root := "/"
		if len(args) == 1 {
			root = fsPath(args[0])
		}
		fi, err := fsys.Stat(root)
		if err != nil {
			return err
		}
		var ents []fsEntry
		if !fi.IsDir() {
			ents = []fsEntry{newFSEntry(path.Base(root), fi)}
		} else if ents, err = fsList(fsys, root, recurse); err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		switch {
		case asJSON:
			if ents == nil {
				ents = []fsEntry{}
			}
			return json.NewEncoder(w).Encode(ents)
		case long:
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tSIZE\tINODE\tVERSION\tMODIFIED\tNAME")
			for _, e := range ents {
				size := strconv.FormatInt(e.Size, 10)
				if human {
					size = volume.FormatSize(e.Size)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", e.Type, size, e.Inode, e.Version,
					e.Modified.Local().Format("2006-01-02 15:04:05"), e.name())
			}
			return tw.Flush()
		}
		for _, e := range ents {
			if _, err := fmt.Fprintln(w, e.name()); err != nil {
				return err
			}
		}
		return nil
	})
	f := cmd.Flags()
	f.BoolVarP(&long, "long", "l", false, "type, size, inode, version and time")
	f.BoolVarP(&recurse, "recursive", "R", false, "the whole tree below PATH")
	// -h is ls's own: human-readable sizes, as GNU ls; --help stays.
	f.Bool("help", false, "help for ls")
	f.BoolVarP(&human, "human-readable", "h", false, "with -l, sizes as 1.5 MiB")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// fsList lists directory dir's entries, or with recurse its whole tree
// depth first in name order, each named by its path relative to dir.
func fsList(fsys *offloadfs.FS, dir string, recurse bool) ([]fsEntry, error) {
	root := strings.TrimPrefix(path.Clean(dir), "/")
	if root == "" {
		root = "."
	}
	var out []fsEntry
	err := iofs.WalkDir(fsys.IOFS(), root, func(p string, de iofs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		rel := p
		if root != "." {
			rel = strings.TrimPrefix(p, root+"/")
		}
		out = append(out, newFSEntry(rel, fi))
		if de.IsDir() && !recurse {
			return iofs.SkipDir
		}
		return nil
	})
	return out, err
}

// fsCopy copies src to dst in fsCopyBuf pieces, until src ends or ctx is
// done (ctxio.Copy: a source that ended as ctx was cancelled fails).
func fsCopy(ctx context.Context, dst io.Writer, src io.Reader) (int64, error) {
	return ctxio.Copy(ctx, dst, src, fsCopyBuf)
}

func newFSPutCmd(g *globals) *cobra.Command {
	var c conn
	cmd := &cobra.Command{
		Use:   "put LOCAL REMOTE",
		Short: "Copy a local file (or - for stdin) into the file system",
		Long: `put copies LOCAL (- reads stdin) to REMOTE. If REMOTE is a directory, or ends
in a slash, the file goes into it under LOCAL's name. The copy is written
under a temporary name and renamed over REMOTE when complete, so an
interrupted put leaves REMOTE as it was.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remote := args[0], args[1]
			var src io.Reader = cmd.InOrStdin()
			if local != "-" {
				f, err := os.Open(local)
				if err != nil {
					return err
				}
				defer f.Close()
				if fi, err := f.Stat(); err != nil {
					return err
				} else if fi.IsDir() {
					return fmt.Errorf("put %s: is a directory (put copies one file)", local)
				}
				src = f
			}
			return fsWith(cmd, g, &c, true, func(fsys *offloadfs.FS) error {
				dst := fsPath(remote)
				into := strings.HasSuffix(remote, "/")
				if fi, err := fsys.Stat(dst); err == nil && fi.IsDir() {
					into = true
				}
				if into {
					if local == "-" {
						return fmt.Errorf("put - %s: a directory; name the file to write stdin to", dst)
					}
					dst = path.Join(dst, filepath.Base(local))
				}
				if dst == "/" {
					return fsErrorf(syscall.EISDIR, "put", dst)
				}
				if fi, err := fsys.Stat(path.Dir(dst)); err != nil {
					return err
				} else if !fi.IsDir() {
					return fsErrorf(syscall.ENOTDIR, "put", dst)
				}
				_, err := fsys.PutFile(cmd.Context(), dst, src)
				return err
			})
		},
	}
	c.flags(cmd)
	return cmd
}

func newFSGetCmd(g *globals) *cobra.Command {
	return fsCommand(g, false, &cobra.Command{
		Use:   "get REMOTE LOCAL",
		Short: "Copy a file out of the file system (LOCAL - for stdout)",
		Long: `get copies REMOTE to LOCAL (- writes stdout). If LOCAL is a directory, the
file goes into it under REMOTE's name. It is written under a temporary name
and renamed into place when complete.`,
		Args: cobra.ExactArgs(2),
	}, func(cmd *cobra.Command, args []string, fsys *offloadfs.FS) error {
		remote, local := fsPath(args[0]), args[1]
		f, err := fsOpenFile(fsys, "get", remote)
		if err != nil {
			return err
		}
		defer f.Close()
		if local == "-" {
			_, err := fsCopy(cmd.Context(), cmd.OutOrStdout(), f)
			return err
		}
		if fi, err := os.Stat(local); err == nil && fi.IsDir() {
			local = filepath.Join(local, path.Base(remote))
		}
		return fsGet(cmd.Context(), local, f)
	})
}

// fsOpenFile opens the file p for op (get, cat); a directory is EISDIR.
func fsOpenFile(fsys *offloadfs.FS, op, p string) (*offloadfs.File, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		err = fsErrorf(syscall.EISDIR, op, p)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// fsGet writes src to a temporary file next to local and renames it into
// place.
func fsGet(ctx context.Context, local string, src io.Reader) error {
	dir, base := filepath.Split(local)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".part-*")
	if err != nil {
		return err
	}
	_, err = fsCopy(ctx, tmp, src)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), local)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

func newFSCatCmd(g *globals) *cobra.Command {
	return fsCommand(g, false, &cobra.Command{
		Use:   "cat PATH...",
		Short: "Write files to stdout",
		Args:  cobra.MinimumNArgs(1),
	}, func(cmd *cobra.Command, args []string, fsys *offloadfs.FS) error {
		for _, a := range args {
			f, err := fsOpenFile(fsys, "cat", fsPath(a))
			if err != nil {
				return err
			}
			_, err = fsCopy(cmd.Context(), cmd.OutOrStdout(), f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func newFSRmCmd(g *globals) *cobra.Command {
	var recursive, missing bool
	cmd := fsCommand(g, true, &cobra.Command{
		Use:   "rm PATH...",
		Short: "Remove files (and with -r, directories and their contents)",
		Long: `rm removes files. Directories need -r, which removes them with everything
in them. With -f, paths that do not exist are not an error. rm goes on
after an error, and fails if any path failed.`,
		Args: cobra.MinimumNArgs(1),
	}, func(cmd *cobra.Command, args []string, fsys *offloadfs.FS) error {
		var errs []error
		for _, a := range args {
			p := fsPath(a)
			fi, err := fsys.Stat(p)
			switch {
			case errors.Is(err, iofs.ErrNotExist) && missing:
				continue
			case err != nil:
			case p == "/":
				err = fmt.Errorf("rm /: refusing to remove the root")
			case fi.IsDir() && !recursive:
				err = &fsCLIError{fmt.Sprintf("rm %s: is a directory (use -r)", p), syscall.EISDIR}
			case fi.IsDir():
				err = fsys.RemoveAll(p)
			default:
				err = fsys.Remove(p)
			}
			if err != nil {
				errs = append(errs, fsDescribe(err))
			}
		}
		return errors.Join(errs...)
	})
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	cmd.Flags().BoolVarP(&missing, "force", "f", false, "ignore paths that do not exist")
	return cmd
}

func newFSMkdirCmd(g *globals) *cobra.Command {
	var parents bool
	cmd := fsCommand(g, true, &cobra.Command{
		Use:   "mkdir PATH...",
		Short: "Make directories",
		Args:  cobra.MinimumNArgs(1),
	}, func(cmd *cobra.Command, args []string, fsys *offloadfs.FS) error {
		for _, a := range args {
			p := fsPath(a)
			var err error
			if parents {
				err = fsys.MkdirAll(p)
			} else {
				err = fsys.Mkdir(p)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "make parents as needed; no error if it exists")
	return cmd
}

func newFSMvCmd(g *globals) *cobra.Command {
	return fsCommand(g, true, &cobra.Command{
		Use:   "mv OLD NEW",
		Short: "Rename or move a file or directory",
		Long: `mv renames OLD to NEW, atomically. If NEW is an existing directory, OLD moves
into it; if it is a file, OLD (a file) replaces it.`,
		Args: cobra.ExactArgs(2),
	}, func(cmd *cobra.Command, args []string, fsys *offloadfs.FS) error {
		oldp, newp := fsPath(args[0]), fsPath(args[1])
		if _, err := fsys.Stat(oldp); err != nil {
			return err
		}
		if fi, err := fsys.Stat(newp); err == nil && fi.IsDir() && newp != oldp {
			newp = path.Join(newp, path.Base(oldp))
		}
		return fsys.Rename(oldp, newp)
	})
}

// fsStat is stat's report.
type fsStat struct {
	fsEntry
	BlockSize       int        `json:"block_size"`
	AllocatedBlocks uint64     `json:"allocated_blocks"`
	DeviceBlockSize int        `json:"device_block_size"`
	Extents         []fsExtent `json:"extents"`
}

// fsExtent is one extent of a file's versioned extent map, in the
// namespace's logical blocks: what a pushdown request carries.
type fsExtent struct {
	FileOffset int64  `json:"file_offset"`
	LBA        uint64 `json:"lba"`
	Blocks     uint32 `json:"blocks"`
}

func newFSStatCmd(g *globals) *cobra.Command {
	var (
		c      conn
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "stat PATH",
		Short: "Describe a file: size, inode, extent-map version and extents",
		Long: `stat prints a file's size, inode and extent-map version, and its extent map
in the namespace's logical blocks, with each extent's offset in the file:
the (inode, version, extents) a pushdown request names the file by. The
version changes whenever the map does (growth, truncation, removal), not
on overwrites.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := fsPath(args[0])
			s, err := fsMount(cmd.Context(), g, &c, fsMountOpts{})
			if err != nil {
				return err
			}
			defer s.close()
			st, err := fsStatOf(s, p)
			if err != nil {
				return fsDescribe(err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(w).Encode(st)
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "path:\t%s\n", st.Path)
			fmt.Fprintf(tw, "type:\t%s\n", st.Type)
			fmt.Fprintf(tw, "size:\t%d (%s)\n", st.Size, volume.FormatSize(st.Size))
			fmt.Fprintf(tw, "inode:\t%d\n", st.Inode)
			fmt.Fprintf(tw, "version:\t%d\n", st.Version)
			fmt.Fprintf(tw, "modified:\t%s\n", st.Modified.Local().Format(time.RFC3339Nano))
			fmt.Fprintf(tw, "allocated:\t%d blocks of %s\n", st.AllocatedBlocks, volume.FormatSize(int64(st.BlockSize)))
			if st.Type == "file" {
				fmt.Fprintf(tw, "extents:\t%d, in %d-byte logical blocks of namespace %d\n", len(st.Extents), st.DeviceBlockSize, c.nsid)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(st.Extents) == 0 {
				return nil
			}
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "#\tFILE OFFSET\tLBA\tBLOCKS\tBYTES\t")
			for i, x := range st.Extents {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t\n", i, x.FileOffset, x.LBA, x.Blocks,
					volume.FormatSize(int64(x.Blocks)*int64(st.DeviceBlockSize)))
			}
			return tw.Flush()
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// fsStatOf describes p, with its extent map if it is a file. The
// version and extents come from one snapshot of the map.
func fsStatOf(s *fsSession, p string) (*fsStat, error) {
	f, err := s.fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st := &fsStat{
		fsEntry:         newFSEntry(p, fi),
		BlockSize:       s.fsys.Usage().BlockSize,
		DeviceBlockSize: s.ns.BlockSize(),
		Extents:         []fsExtent{},
	}
	if ofi, ok := fi.Sys().(*offloadfs.FileInfo); ok {
		st.AllocatedBlocks = ofi.AllocatedBlocks()
	}
	if fi.IsDir() {
		return st, nil
	}
	m, err := f.Extents()
	if err != nil {
		return nil, err
	}
	st.Inode, st.Version = m.ID, m.Version
	var off int64
	for _, x := range m.Extents {
		st.Extents = append(st.Extents, fsExtent{FileOffset: off, LBA: x.LBA, Blocks: x.Blocks})
		off += int64(x.Blocks) * int64(st.DeviceBlockSize)
	}
	return st, nil
}

// errFsckProblems makes fsck exit non-zero after printing its report.
var errFsckProblems = errors.New("fsck found problems")

// fsck's exit codes, e2fsck's (see fsck(8)).
const (
	fsckUncorrected = 4 // file system errors left uncorrected
	fsckOperational = 8 // operational error
)

func newFSFsckCmd(g *globals) *cobra.Command {
	var (
		c      conn
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Check the file system's consistency; exit 4 if it has problems",
		Long: `fsck checks the committed file system without changing it: every reachable
inode and directory verifies, every block belongs to exactly one file and
the bitmaps agree, every inode in use is reachable exactly once. It prints
a summary and any problems. Exit codes are e2fsck's: 0 clean, 4 problems
found (fsck never repairs, so they are left uncorrected), 8 fsck could
not check (the target cannot be reached, the file system does not mount).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := fsMount(cmd.Context(), g, &c, fsMountOpts{})
			if err != nil {
				return &exitError{fsckOperational, err}
			}
			defer s.close()
			r, err := s.fsys.Fsck(cmd.Context())
			if err != nil {
				return &exitError{fsckOperational, err}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				out := struct {
					OK         bool     `json:"ok"`
					Files      uint64   `json:"files"`
					Dirs       uint64   `json:"dirs"`
					Orphans    uint64   `json:"orphans"`
					UsedBlocks uint64   `json:"used_blocks"`
					FreeBlocks uint64   `json:"free_blocks"`
					Problems   []string `json:"problems"`
					Truncated  bool     `json:"truncated"`
				}{r.OK(), r.Files, r.Dirs, r.Orphans, r.UsedBlocks, r.FreeBlocks, r.Problems, r.Truncated}
				if out.Problems == nil {
					out.Problems = []string{}
				}
				if err := json.NewEncoder(w).Encode(out); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(w, "%d files, %d directories, %d removed while open; %d blocks used, %d free\n",
					r.Files, r.Dirs, r.Orphans, r.UsedBlocks, r.FreeBlocks)
				for _, p := range r.Problems {
					fmt.Fprintln(w, "problem:", p)
				}
				if r.Truncated {
					fmt.Fprintln(w, "problem: ... (more not listed)")
				}
				if r.OK() {
					fmt.Fprintln(w, "fsck: clean")
				}
			}
			if !r.OK() {
				return &exitError{fsckUncorrected, fmt.Errorf("%w: %d", errFsckProblems, len(r.Problems))}
			}
			return nil
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func newFSDfCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := fsCommand(g, false, &cobra.Command{
		Use:   "df",
		Short: "Show space and inodes used and free",
		Args:  cobra.NoArgs,
	}, func(cmd *cobra.Command, _ []string, fsys *offloadfs.FS) error {
		u := fsys.Usage()
		w := cmd.OutOrStdout()
		if asJSON {
			return json.NewEncoder(w).Encode(struct {
				BlockSize    int    `json:"block_size"`
				Blocks       uint64 `json:"blocks"`
				FreeBlocks   uint64 `json:"free_blocks"`
				Inodes       uint64 `json:"inodes"`
				FreeInodes   uint64 `json:"free_inodes"`
				JournalBytes uint64 `json:"journal_bytes"`
				CommitSeq    uint64 `json:"commit_seq"`
			}{u.BlockSize, u.Blocks, u.FreeBlocks, u.Inodes, u.FreeInodes, u.JournalSize, u.CommitSeq})
		}
		bs := int64(u.BlockSize)
		used := u.Blocks - u.FreeBlocks
		pct := 0.0
		if u.Blocks > 0 {
			pct = 100 * float64(used) / float64(u.Blocks)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "SIZE\tUSED\tFREE\tUSE%\tINODES\tIUSED\tIFREE\tBLOCK\tJOURNAL\t")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f%%\t%d\t%d\t%d\t%s\t%s\t\n",
			volume.FormatSize(int64(u.Blocks)*bs), volume.FormatSize(int64(used)*bs), volume.FormatSize(int64(u.FreeBlocks)*bs),
			pct, u.Inodes, u.Inodes-u.FreeInodes, u.FreeInodes, volume.FormatSize(bs), volume.FormatSize(int64(u.JournalSize)))
		return tw.Flush()
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newFSMountCmd(g *globals) *cobra.Command {
	var (
		c                  conn
		readOnly, debug    bool
		allowOther         bool
		metrics            string
		timeout            time.Duration
		queues, queueDepth int
	)
	cmd := &cobra.Command{
		Use:   "mount DIR",
		Short: "Mount the file system on DIR through FUSE, in the foreground",
		Long: `mount serves the file system on DIR through the kernel's FUSE, so ordinary
tools read and write its files, until Ctrl-C, SIGTERM or "umount DIR"; then
it unmounts, commits and exits. While files are open there, Ctrl-C says so
and keeps serving; a second Ctrl-C detaches the mount lazily (it goes away
when the last file closes).

offloadfs has no owners, permissions, links or extended attributes: files
show as 0644 and directories as 0755, owned by the user running mount.
Modification times are stored (touch, cp -p, tar -x, rsync -a keep them);
access times are not. chmod and chown to anything but what is shown fail
with EPERM rather than pretend (tar --no-same-permissions, cp
--no-preserve=mode). fsync commits (one commit
covers every file); metadata is also committed every 5 s and at unmount.

Needs /dev/fuse, and root (mount(2) directly) or the fusermount3 helper
(package fuse3).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			// Check the mount point before taking ownership of the
			// file system (a read-write mount writes the journal).
			if err := fusefs.CheckMountPoint(dir); err != nil {
				return err
			}
			log := g.logger()
			mo := fsMountOpts{rw: !readOnly, host: host.Options{IOQueues: queues, QueueDepth: queueDepth}}
			if metrics != "" {
				reg, stop, err := serveMetrics(metrics, log)
				if err != nil {
					return err
				}
				defer stop()
				mo.metrics = offloadfs.NewMetrics(reg)
			}
			s, err := fsMount(cmd.Context(), g, &c, mo)
			if err != nil {
				return err
			}
			srv, err := fusefs.Mount(dir, s.fsys, fusefs.Options{
				FsName:     fmt.Sprintf("offloadfs:%s/%d", c.nqn, c.nsid),
				Timeout:    timeout,
				AllowOther: allowOther,
				Logger:     log,
				Debug:      debug,
			})
			if err != nil {
				return errors.Join(err, s.close())
			}
			mode := "read-write"
			if readOnly {
				mode = "read-only"
			}
			log.Info("offloadfs mounted; Ctrl-C or `umount DIR` unmounts", "dir", srv.Dir(), "mode", mode, "nqn", c.nqn, "nsid", c.nsid)
			g.sig.set(signalsOwn)
			fsServe(srv, log)
			log.Info("unmounted; committing", "dir", srv.Dir())
			return s.close()
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.BoolVar(&readOnly, "read-only", false, "mount the committed state read-only (any number of hosts can)")
	f.DurationVar(&timeout, "cache-timeout", time.Second, "how long the kernel caches names and attributes")
	f.BoolVar(&allowOther, "allow-other", false, "let other users use the mount")
	f.IntVar(&queues, "queues", 2, "NVMe/TCP I/O queues (connections)")
	f.IntVar(&queueDepth, "qd", 0, "commands in flight per queue (default 128)")
	f.BoolVar(&debug, "debug", false, "log every FUSE request (with --log-level debug)")
	f.StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9101)")
	return cmd
}

// fsServe returns when the mount is gone: unmounted from outside, or
// unmounted here on SIGINT or SIGTERM. A busy mount is detached lazily on
// the second signal.
func fsServe(srv *fusefs.Server, log *slog.Logger) {
	// Our own channel: main's signal context is done after the first
	// signal and cannot count them.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	asked := false
	for {
		select {
		case <-done:
			return
		case sig := <-sigs:
			if asked {
				log.Warn("detaching the mount; it goes when the last file there closes", "dir", srv.Dir())
				if err := srv.Detach(); err != nil {
					log.Error("detach", "err", err)
				}
				continue
			}
			asked = true
			log.Info("unmounting", "signal", sig.String(), "dir", srv.Dir())
			if err := srv.Unmount(); err != nil {
				log.Warn("cannot unmount yet; signal again to detach lazily", "err", err)
			}
		}
	}
}
