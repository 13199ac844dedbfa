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

#include "registry_options.h"

#define SF_REGISTRY_MAX_WORKERS 32
#define SF_REGISTRY_ERR_MAX 2048

/* The fractions of the negotiated session timeout everything is timed by, defined here once.
 * A session is alive for at least the timeout after a round trip the leader confirmed was
 * sent, so:
 *   lease  2/3: a lease ends well before ZooKeeper can expire the session and let another
 *               node claim the id, leaving a margin for clock-rate differences;
 *   renew  1/6: a renewal every 1/6 keeps the lease valid through a few slow or failed
 *               round trips in a row;
 *   grace  1/3: disconnected this long, the registry fences without waiting for the lease. */
static inline int64_t sf_registry_lease_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms * 2 / 3;
}

static inline int64_t sf_registry_renew_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 6 > 0 ? session_timeout_ms / 6 : 1;
}

static inline int64_t sf_registry_grace_ms(int64_t session_timeout_ms)
{
    return session_timeout_ms / 3;
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

/* Waits for the session (up to the session timeout, at least 5 s), checks the peers (unless
 * skipped), claims the worker id (static or automatic), and waits until the clock is past the
 * timestamp recorded for it. On success *worker_id is the id held and *floor_ms the recorded
 * timestamp (-1 if none). Blocks; call once. sf_registry_cancel makes it return -1 at once
 * with "stopped" in err, leaving no worker node behind. */
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

/* The session timeout ZooKeeper granted, in ms. */
int sf_registry_session_timeout_ms(sf_registry *r);

/* Makes a blocked sf_registry_claim return -1 with "stopped" (within 200 ms, unless a single
 * ZooKeeper round trip is in flight: that ends within the client's timeout), deleting a worker
 * node it had created; the registry does nothing more but sf_registry_close. Thread-safe:
 * meant for another thread, e.g. on SIGTERM during start-up. */
void sf_registry_cancel(sf_registry *r);

/* Stops the thread, records the last timestamp (the conditional write above), and closes the
 * session so that the ephemeral node disappears at once. Frees r; NULL is allowed. */
void sf_registry_close(sf_registry *r);

/* Parses a node name as a worker id: canonical decimal 0..31 only ("5", not "05", "+5" or
 * " 5"), so every id has exactly one node name. */
bool sf_registry_parse_worker_id(const char *name, int64_t *id);

#endif /* SF_REGISTRY_H */
