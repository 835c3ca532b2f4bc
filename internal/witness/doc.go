// Package witness decides, without the API server in the path, whether a
// node may keep answering for a static IP and whether the controller may
// give that IP to another node. It holds only decisions: pure functions of
// what one process has seen and of its own monotonic clock. The ip-agent,
// the IP controller and the exhaustive model test (model_test.go) call the
// same functions, so the model checks what ships.
//
// # The protocol (docs/design/failover.md has the full argument)
//
// A node's agent runs in sessions, each with a generation (Gen) higher
// than any it used before. A hold is a node's claim on an address in one
// generation: Hold{Node, Gen}. The controller names, when it places an
// address on a node, the hold's witnesses: other nodes of the pool, fixed
// for the life of the hold.
//
//   - The holder probes each witness. A witness answers a probe with a
//     vouch unless it has declared the sender's generation silent.
//   - The holder may answer for the address until HoldFor after it *sent*
//     the latest probe that a quorum (a majority) of the hold's witnesses
//     vouched for (Holder.HeldUntil). Counting from the send, not from the
//     answer, makes any network delay work against the holder, never for it.
//   - A witness that has heard nothing from a node's generation for
//     SilentAfter declares that generation, and every earlier one, silent
//     (Witness.Tick), publishes the declaration in the API, and never
//     vouches for it again (rule W1; the declaration is restored from the
//     API before a restarted witness answers anything).
//   - The controller moves the address away from a hold only when a quorum
//     of the hold's witnesses has published a declaration that covers it
//     (MayMove).
//
// # Why two nodes never answer
//
// Any two majorities of the same witness set share a witness w. w's last
// vouch for the hold answered a probe that w received, at the latest, when
// it last heard the holder, so the probe was sent at least SilentAfter
// before w declared. The holder's right to answer from that vouch ended
// HoldFor after the send. Timing.Validate checks that HoldFor, stretched
// by the worst clock-rate error, plus the time the node may take to stop
// (FenceSlack), is shorter than SilentAfter shrunk by the same error: the
// holder is silent before the first declaration of the quorum exists, so
// before the controller can act on the quorum.
package witness
