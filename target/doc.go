// Package target is nearstore's NVMe over Fabrics target for the TCP
// transport: it exports volumes as namespaces that any NVMe/TCP host — the
// Linux kernel's nvme-tcp, or nearstore's own host package — can connect to.
//
// A Server owns one listener, a discovery controller and any number of NVM
// subsystems, each with its namespaces. Every TCP connection is one queue:
// the first command on it is a Fabrics Connect, which either creates a
// controller (queue 0, the admin queue) or attaches an I/O queue to an
// existing one.
//
// The package has two layers, as SPDK's lib/nvmf does:
//
//   - The connection layer (conn.go) parses PDUs, gathers a command's data
//     (in-capsule, or asked for with R2T and placed from H2CData), and sends
//     C2HData and the completion. It knows what a command moves, never what
//     it means. A command is a request (request.go) moving through named
//     states, which owns its buffers from the moment they are read until it
//     is freed, the one place they go back to the pool.
//   - The controller layer (ctrlr.go) executes a command: session.exec(ctx,
//     r) returns its completion. One table per command set — fabrics
//     (cmds_fabrics.go), admin (cmds_admin.go), NVM I/O (cmds_io.go), each
//     with nearstore's vendor commands (cmds_vendor.go), and Key Value I/O
//     (cmds_kv.go) for KV namespaces when CC.CSS enables it (iocs.go) —
//     gives an opcode's data direction, access class, metrics label and
//     handler, and the rules of a whole set (Connect first, CSTS.RDY,
//     reservations, grants) are applied in exec, once. Handlers need no
//     socket.
//
// Each queue has one goroutine that reads PDUs and decides; it never waits on
// a slow volume. Admin commands are cheap and run inline. Reads and writes
// of up to 128 KiB on an in-memory backend also run inline on the reader,
// because a goroutine handoff costs more than the copy; completions of
// commands the reader runs are buffered and leave in one write when the
// reader has drained its input (it flushes before every socket read, the
// only place it blocks). Every other command (file, device and simulated
// backends, storage functions, large transfers, nearstore's admin
// commands) runs in its own goroutine, so many commands per queue and many
// queues per host are in flight at once, and its completion goes out
// through the queue's tcp.Writer, which coalesces concurrent senders into
// as few system calls as load allows. Every command runs under its queue's
// context, which ends when the connection fails or closes or the server's
// shutdown grace period ends, and stops a storage function mid-run.
//
// Access control and per-host limits are applied in the controller layer,
// once (docs/SECURITY.md): Connect admits only a subsystem's allowed hosts
// (SubsystemConfig.AllowedHosts, AllowAnyHost; a subsystem with neither
// is served on loopback only) and joins an I/O queue only to its own
// host's controller; every buffer a host's command holds comes from one
// accounted pool, sized by the smallest of what the command asks, what
// its SGL says and MDTS, and grown as data arrives; connections, idle
// controllers, data that never comes, functions and their calls are
// bounded per Config, and a host's state goes a lease after the host.
//
// The target checks everything a host sends before acting on it: a
// malformed PDU ends the connection with a C2HTermReq naming the bad field;
// a bad command (unknown opcode, LBA out of range, a transfer longer than
// MDTS, an SGL that disagrees with the command) fails with the status the
// NVMe specification names, and no data is written unless the whole command
// checked out. A write whose data never fully arrives is never executed.
//
// Beyond standard NVMe, hosts load storage functions and run them next to
// the data (functions.go), keep the target's copy of their file systems'
// versioned extent maps, against which requests naming files by inode are
// checked (extentmaps.go: session.resolveFiles, the one place an extent
// version is checked), and grant other hosts access to chosen extents for
// a lease (grants.go). docs/PROTOCOL.md specifies the commands.
package target
