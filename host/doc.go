// Package host is nearstore's NVMe over Fabrics initiator for the TCP
// transport: it connects to a controller (nearstore's target, the Linux
// kernel target, or any NVMe/TCP subsystem), brings it up the way the Linux
// host does, and exposes its namespaces as io.ReaderAt/io.WriterAt plus an
// asynchronous, many-commands-in-flight API.
//
// # Associations and queues
//
// A Controller is a handle that outlives connections. What it talks through
// at any moment is an association: one admin queue and IOQueues I/O queues,
// each its own TCP connection, all bound to one controller ID the target
// handed out in the admin queue's Fabrics Connect. When any connection of an
// association breaks, the whole association is discarded and a fresh one is
// built in the background (see Reconnection); Namespace handles survive
// because they are keyed by NSID, not by association.
//
// # Command identifiers and slots
//
// Each queue owns a free list of command identifiers (CIDs), one per slot
// the controller granted. A submission takes a CID (blocking while none is
// free: this is the queue-depth backpressure), records the Call in the
// queue's CID table and sends the capsule. The CID returns to the free list
// only when the controller answers for it (CapsuleResp, or the last C2HData
// with the SUCCESS flag) or the connection dies, never earlier: re-using a
// CID the controller still considers in flight would corrupt both commands.
// That is also why cancelling a submitted command's context completes the
// Call with ctx.Err() at once but keeps the slot: the command is abandoned,
// its buffers are detached (an outgoing buffer still owed to the controller
// is copied first), and the eventual completion is swallowed.
//
// # One reader, coalesced writers
//
// Each queue has exactly one reader goroutine. It reads PDU headers with the
// nvme/tcp Framer and dispatches them: CapsuleResp completes a Call, C2HData
// lands directly in the caller's buffer at DATAO (no copy), R2T is validated
// and handed to the queue's data sender goroutine, C2HTermReq ends the
// connection. The reader never blocks on the network in the write direction,
// so a target that writes responses inline while it reads cannot deadlock
// against us: when it runs a Call's OnDone, the commands OnDone submits
// are written by the reader before it reads again, and whatever the socket
// does not take at once is queued and sent by another goroutine
// (tcp.RawWriter's SetNoWait), so an event loop on the reader costs no
// goroutine switch per completion and still never waits for the network. Every sender (the submitting goroutines, the data sender, the
// keep-alive) writes through one tcp.Writer, which combines writes: a sender
// that finds another writing the socket leaves its capsule to it and
// returns, and the writer sends all that was framed meanwhile in one
// writev before it lets go, so under load many capsules leave in one system
// call, nobody waits for another's system call, and an idle queue never
// holds a capsule back. A submitter with other commands in flight yields
// its processor once before it writes (tcp.Writer.SetLinger), so the
// submitters that a burst of completions woke on that processor add their
// capsules to its write: without that they run one after another and each
// writes alone. A Batch (Namespace.NewBatch) goes further: it buffers all
// its commands and flushes once, as the block layer's plug does, so a
// submitter that reaps many completions resubmits them in one write.
//
// # Data movement
//
// Host-to-controller data that fits the queue's in-capsule limit (IOCCSZ on
// I/O queues, 8 KiB on the admin queue) travels in the command capsule;
// larger data is described by a Transport SGL Data Block and sent in H2CData
// PDUs of at most MAXH2CDATA bytes as the controller asks with R2Ts.
// Controller-to-host data always arrives in C2HData PDUs. nearstore's vendor
// commands may move data both ways: the outgoing part must fit in the
// capsule, and DPTR then describes the incoming part (a Transport SGL Data
// Block of len(in) bytes) while the capsule's data length is given by the
// PDU itself.
//
// Protocol violations by the controller (an R2T outside the command's
// buffer, data for a CID that is not in flight, a malformed header) are
// fatal: the host sends an H2CTermReq, closes the connection, and treats it
// as a connection loss.
//
// # Reconnection
//
// On connection loss every command in flight on the controller fails with
// an error wrapping ErrConnectionLost (the host cannot know whether it
// executed), and a background goroutine rebuilds the association with
// exponential backoff from Options.ReconnectDelay to 5 s. Submissions made
// meanwhile wait for it, bounded by their context and
// Options.MaxReconnectWait, then proceed on the new association. A Keep
// Alive command goes out on the admin queue every KATO/2; its failure is a
// connection loss too. After Options.ControllerLossTimeout without a new
// association (Linux's ctrl_loss_tmo, 10 minutes by default) the controller
// gives up: every waiting and later submission fails with ErrConnectionLost,
// and only Close is left.
//
// Every new association scans the namespaces again before any submission
// may use it. An NSID whose identifiers (NGUID, UUID) or block size
// changed names another volume now: its old Namespace handles refuse
// every command with ErrNamespaceChanged, so nothing meant for the old
// volume is written to the new one, and Controller.Namespace returns a
// handle to the new namespace.
//
// Close shuts the controller down cleanly (CC.SHN normal shutdown, then
// CSTS.SHST polled) and waits for every goroutine the Controller started.
package host
