/* registry.h -- claims a worker id in ZooKeeper, guards it (fencing) and records its last timestamp.
 *
 * The layout is the original Snowflake's, so legacy nodes and their tools share one ensemble:
 * under worker_id_path each live node owns an EPHEMERAL child named by its worker id in
 * canonical decimal ("5", never "05"), holding "hostname:port". Beyond the original:
 *   - automatic ids: nodes queue with ZooKeeper's lock recipe under lock_path;
 *   - fencing: a node that lost (or may have lost) its session stops serving and claims again;
 *   - restart safety: the last used timestamp of each id is kept under state_path, and a new
 *     holder does not serve before its clock is past it.
 * The registry knows nothing of sockets: peers are queried through a callback.
 *
 * Convention: functions that can fail return 0 or -1 and write a message a person can act on
 * into the caller's err buffer. */
#ifndef SF_REGISTRY_H
#define SF_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/registry_options.h"

#define SF_REGISTRY_MAX_WORKERS 32

/* The lease: when a node may still hand out ids, from what it can know of when ZooKeeper's
 * leader may expire its session, with T the session timeout granted now.
 *
 * The leader expires a session T after the last activity of it that the leader has heard of
 * (rounded up to a tick). A follower does not tell the leader of a session's activity when
 * it forwards the session's write: it reports the activity of its sessions in its answer to
 * the leader's ping, every tickTime/2. Those answers and the forwarded writes travel on one
 * connection in order, so when the leader applies our write R, it has heard of every request
 * of ours that reached the follower one ping before R did. ZooKeeper grants no session
 * shorter than 2 tickTime by default, so a ping comes at least every T/4 (REPORT). Hence:
 *   - a renewal confirmed on a connection certifies every earlier confirmed renewal sent on
 *     that connection at least REPORT before it: the leader's expiry of our session is no
 *     earlier than T after the latest such send time, the anchor;
 *   - a new session is created by the leader after zookeeper_init was called: that call is
 *     the session's first anchor;
 *   - a lease lasts LEASE = 2T/3 from the anchor, never from the renewal that confirmed it,
 *     and comes from renewals on one connection only (a reconnection starts over: what the
 *     old follower saw may never reach the leader).
 * In steady state, with a renewal every RENEW = T/8, the anchor is two renewals back and a
 * renewal yields a lease until 5T/12 after its send time: T/3 before the earliest expiry
 * the leader may apply. After a pause (a stalled or stopped process, a slow link) or a
 * reconnection, the lease rests on the last renewal before it (the one renewal at waking
 * certifies it; a new connection certifies nothing until its second renewal) and ends 2T/3
 * after that: a node whose renewals stopped for longer refuses ids until two renewals on one
 * connection, one REPORT apart (T/4: 2.5 s with the default T of 10 s), certify a fresh
 * anchor. That is what it costs. Serving begins only with a lease that has REPORT left, so
 * that the renewals to come can certify the next anchor in time: a new session's first
 * lease costs nothing when the claim takes less than 5T/12; otherwise serving starts one
 * REPORT later.
 * Should the session timeout change on a reconnection (another server, other bounds), the
 * shorter of the two times the anchor is what counts.
 *
 * The same renewal records a reservation in the id's state node: the highest timestamp the
 * node may use under the lease it may get from that renewal (its wall clock when sending +
 * LEASE). Ids above the last confirmed reservation are never handed out, so the reservation
 * is a floor for the next holder whatever the clocks of the two nodes say. The state node
 * holds "reserved <unix ms>" while the id is held, "released <unix ms>" (the exact last
 * timestamp) after a clean stop whose last write ZooKeeper confirmed; a plain number, from an
 * earlier version, is read as a reservation that ends one LEASE later.
 * The reservation's length R is LEASE itself, not a setting: an id under a renewal is made
 * within its lease, so LEASE is as far as the node can use; a longer R would only hold the
 * next holder back, a shorter one would refuse ids while the lease holds (in steady state
 * the lease ends 5T/12 after the send, the reservation 2T/3 after). A crash therefore loses
 * nothing: state_interval_ms, the session timeout and startup_sleep_ms bound only how long
 * the next holder waits, never whether it can repeat a (timestamp, worker) pair.
 *
 * GRACE = T/3: disconnected this long, the registry fences without waiting for the lease. */
static inline int64_t sf_registry_lease_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms * 2 / 3;
}

static inline int64_t sf_registry_renew_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 8 > 0 ? session_timeout_ms / 8 : 1;
}

static inline int64_t sf_registry_report_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 4;
}

static inline int64_t sf_registry_grace_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 3;
}

/* How long sf_registry_close waits for ZooKeeper to confirm its last record and to drop our
 * watches, together: the grace, T/3. A silent ensemble cannot hold a close longer (the next
 * holder then waits out the reservation instead of starting right after the last id). */
static inline int64_t sf_registry_close_wait_ms(int64_t session_timeout_ms)
{
    return sf_registry_grace_ms(session_timeout_ms);
}

typedef struct sf_registry sf_registry;

/* Sets the ZooKeeper client library's own logging: its warnings when verbose, else nothing
 * (it would log every refused reconnect while ZooKeeper is down). Call before any other. */
void sf_registry_set_client_logging(bool verbose);


/* Copies the options and starts connecting to ZooKeeper; does not wait for the session (so
 * that sf_registry_cancel can reach a start-up that waits for ZooKeeper: sf_registry_claim
 * waits). Returns NULL with err filled on a bad option. The client library logs at its own
 * level: set it with sf_registry_set_client_logging() first. */
sf_registry *sf_registry_new(const sf_registry_options *opts, char *err, size_t errlen);

/* Returned by sf_registry_claim when no ZooKeeper server answered in time: worth trying again
 * later, unlike its other failures. */
#define SF_REGISTRY_UNREACHABLE (-2)
/* Returned by sf_registry_claim of an automatic id when none of the 32 can be claimed
 * under worker_id_path: another path (another datacenter) may have one. */
#define SF_REGISTRY_ALL_TAKEN (-3)

/* Waits for the session (up to the session timeout, at least 5 s), checks the peers (unless
 * skipped), claims the worker id (static or automatic), and waits until the clock is past the
 * timestamp recorded for it. On success *worker_id is the id held and *floor_ms the recorded
 * timestamp (-1 if none). Blocks; call once. Fails with -1, SF_REGISTRY_UNREACHABLE or
 * SF_REGISTRY_ALL_TAKEN, with err filled. sf_registry_cancel makes it return -1 at once with "stopped" in err, leaving no
 * worker node behind. */
int sf_registry_claim(sf_registry *r, int64_t *worker_id, int64_t *floor_ms, char *err,
                      size_t errlen);

/* Renews the lease once, reports serving (or not) through on_state, and starts the registry's
 * thread, which reports every later transition (session expired, disconnected too long, node
 * lost, lease not renewed, claimed again) and, while not serving, tries again with a backoff
 * of 100 ms doubling to 5 s until it holds an id again.
 *
 * A renewal is one conditional write, sent every sf_registry_renew_ms (or state_interval_ms
 * if shorter): multi{ setData(our worker node, same data, its version),
 * setData(state_path/<id>, max(recorded, now, last id), its version) }. A write, because a
 * follower cut off from the leader still answers reads from its stale copy for up to
 * syncLimit x tickTime while the leader expires our session; a write is forwarded to the
 * leader, which refuses it for an expired session. The versions make it fail when anyone
 * else changed either node, and the result must show the worker node owned by our session.
 * The lease lasts sf_registry_lease_ms from a moment taken before the write was sent. The
 * same write records the last timestamp, so it never lowers it and never lands after the
 * node stopped being ours. */
int sf_registry_watch(sf_registry *r, char *err, size_t errlen);

/* The id held now, or -1 while none is. */
int64_t sf_registry_worker_id(sf_registry *r);

/* How many of the SF_REGISTRY_MAX_WORKERS ids under worker_id_path anyone holds, as last
 * read: a watch on the path's children, set at the claim, reads them again on every change,
 * so this costs nothing per id. -1 before the first read. Thread-safe, lock-free. */
int sf_registry_worker_ids_taken(sf_registry *r);

/* The worker_id_path the registry claims under (its own copy, valid until closed). */
const char *sf_registry_worker_id_path(sf_registry *r);

/* Copies into out (at most max) the "host:port" of each peer under worker_id_path that
 * serves Thrift (not ours, not an embedded holder), for the live clock checks. From any
 * thread: it reads through the current session, which a new session waits for. Returns how
 * many, or -1 with err filled while not connected or when the path cannot be listed. */
int sf_registry_list_peers(sf_registry *r, char (*out)[SF_REGISTRY_PEER_MAX], int max,
                           char *err, size_t errlen);

/* The session timeout ZooKeeper granted, in ms. */
int sf_registry_session_timeout_ms(sf_registry *r);

/* Makes a blocked sf_registry_claim return -1 with "stopped" (within 200 ms, unless a single
 * ZooKeeper round trip is in flight: that ends within the client's timeout), deleting a worker
 * node it had created; the registry does nothing more but sf_registry_close. Thread-safe:
 * meant for another thread, e.g. on SIGTERM during start-up. */
void sf_registry_cancel(sf_registry *r);

/* Stops the thread, records the last timestamp (the conditional write above), and closes the
 * session so that the ephemeral node disappears at once. Frees r; NULL is allowed.
 * How long it takes while ZooKeeper does not answer: the thread's current step (a
 * ZooKeeper request the thread is in, while it claims again, ends within the client's own
 * timeout, 2T/3; a serving registry's thread is in none), then sf_registry_close_wait_ms
 * (T/3) for the last record and the watches, then the client's close, which waits up to
 * 1.5 s for the server's answer while the connection looks alive. */
void sf_registry_close(sf_registry *r);

/* In a child process (fork()) of the one that made r: frees r's own memory and nothing
 * more. The session and the threads are the parent's: closing the session here would end
 * the parent's, and the client library's memory for it cannot be freed without that, so it
 * stays. Takes no lock (a thread of the parent may have held one at the fork). NULL is
 * allowed. */
void sf_registry_forget(sf_registry *r);

#endif /* SF_REGISTRY_H */
