// Package natscluster lets several coordinators share one NATS store: it
// keeps the node registry and the sandboxes' leases in JetStream key-value
// buckets and carries the calls one node forwards to another by NATS
// request and reply. Cluster implements cluster.Cluster; the coordinator
// uses it through that interface only.
//
// It lives beside natsstore and on its connection: Join takes the
// *natsstore.Store of the process, speaks on Store.Conn and opens its
// buckets with Store.Bucket. Its requests fail at once as unavailable
// while the store knows NATS does not answer, and are given up with the
// store's (Store.Unreachable, CutOff, CutOffWrites, Classify; see
// natsstore's doc.go). natsstore does not import this package.
//
// # Layout
//
//	bucket sparkles-nodes (key-value, TTL = the lease TTL, history 1)
//	  <node>                 one key per live node: its name, the
//	                         instance of its current registration and the
//	                         URL of its HTTP API (nodeurl.go); the server
//	                         removes it a TTL after its last renewal
//	bucket sparkles-leases (key-value, no TTL, history 1)
//	  <sandbox id>           the node and instance that hold the sandbox
//	subjects sparkles.node.<node>.call
//	                         the calls forwarded to a node, one request each
//
// A lease holds while the instance it names is the one registered under a
// live node key; see Cluster for how leases are taken, renewed and lapse.
//
// # Fences: the seam with the store
//
// A lease alone cannot stop a node that was paused or cut off past the
// TTL from writing after another node took its sandbox over: its appends
// may arrive late, from a process that does not know yet. So the store
// checks every append against a fence (natsstore's doc.go, "Fencing"),
// and this package puts the fences up. The seam is natsstore.Fences, which
// Join gets once with Store.Fences:
//
//   - Join gives the store a hook that reports whether this node's leases
//     hold now (registered, and renewed within the TTL less a margin); the
//     store asks it before every append to a sandbox it holds, and refuses
//     the append without sending anything once they do not;
//   - Claim, having taken a sandbox's lease (or finding it this
//     instance's), puts up the fence with Fences.Hold before it returns,
//     so the node never writes a sandbox it has no fence of; the fence's
//     sequence is the node's epoch for the sandbox;
//   - Release drops the hold of one sandbox (Fences.Lose); a lapse, a new
//     registration and Close drop them all (Fences.LoseAll).
//
// An append the store refuses so fails with a *natsstore.FencedError,
// which matches sandbox.ErrFenced: the coordinator then stops acting for
// the sandbox without writing.
package natscluster
