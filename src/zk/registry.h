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
 * Where each part lives (src/zk/): the state machine with its waits, the session and its
 * watcher, the public calls (the claim over several paths among them) and the thread
 * (registry.c); the claim: the worker node, the automatic claim's queue and the epoch
 * check-in (registry_claim.c); the lease: its renewals, the arithmetic they rest on and the
 * floor record they write, which a new holder waits past (registry_lease.c); the other
 * holders: the original's peer checks and the holders under the path, watched
 * (registry_peers.c); and, below them, ZooKeeper requests in one round trip and the multi
 * (zkbatch.c). What the
 * promise (no id twice) rests on, and the assumptions it makes of ZooKeeper and the clocks:
 * the manual's "Registration in ZooKeeper" and "Guarantees and assumptions".
 *
 * Convention: functions that can fail return 0, -1 or a negative SF_REGISTRY_* code and write
 * a message a person can act on into the caller's err buffer (errlen bytes; the caller owns
 * it; nothing is written when err is NULL). */
#ifndef SF_REGISTRY_H
#define SF_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/registry_options.h"

#define SF_REGISTRY_MAX_WORKERS 32

/* The lease's arithmetic, for a session timeout T (ms) granted now (registry_lease.c derives
 * each; the manual's "The lease" says what it promises): the lease, LEASE = 15T/16 after its
 * anchor; the renewals' beat, RENEW = T/8; how often a follower reports to the leader at
 * worst, REPORT = T/4; how long a disconnection is ridden out, GRACE = T/3; the longest
 * round trip the lease holds through with renewals renew_ms apart, ROUND_TRIP_LIMIT =
 * (LEASE - REPORT - 2 renew_ms) / 2 (7T/32 on the default beat); and how long
 * sf_registry_close waits for its last record and the watches, GRACE. */
int64_t sf_registry_lease_ms(int64_t session_timeout_ms);
int64_t sf_registry_renew_ms(int64_t session_timeout_ms);
int64_t sf_registry_report_ms(int64_t session_timeout_ms);
int64_t sf_registry_grace_ms(int64_t session_timeout_ms);
int64_t sf_registry_round_trip_limit_ms(int64_t session_timeout_ms, int64_t renew_ms);
int64_t sf_registry_close_wait_ms(int64_t session_timeout_ms);

/* The renewals' round trips, from before the write was sent to its confirmation, as a
 * histogram: counts of those at most each bound (ms) and above the one before, one more
 * count for those above the last. The bounds resolve T/8 to T/2 for every session timeout T
 * from 1 s to 60 s. */
#define SF_REGISTRY_RENEWAL_BUCKETS 32
#define SF_REGISTRY_RENEWAL_BOUNDS_MS                                                       \
    { 1, 2, 5, 10, 25, 50, 100, 125, 150, 200, 250, 300, 400, 500, 625, 750, 1000, 1250,   \
      1500, 2000, 2500, 3000, 4000, 5000, 6000, 7500, 10000, 12500, 15000, 20000, 25000,   \
      30000 }

typedef struct sf_registry_renewal_stats {
    int64_t session_timeout_ms;  /* granted now (T) */
    int64_t round_trip_limit_ms; /* sf_registry_round_trip_limit_ms for it */
    uint64_t confirmed;          /* renewals the leader confirmed */
    uint64_t failed;             /* renewals that got no confirmation */
    int64_t sum_ms;              /* of the confirmed ones' round trips */
    int64_t last_ms;             /* the last confirmed one's, -1 before the first */
    uint64_t buckets[SF_REGISTRY_RENEWAL_BUCKETS + 1];
} sf_registry_renewal_stats;

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
/* Returned by sf_registry_claim when a ZooKeeper request failed for ZooKeeper's reasons (the
 * connection lost or timed out, the session expired): worth trying again, as unreachable. */
#define SF_REGISTRY_ZK_FAILED (-4)
/* Returned by sf_registry_claim when the claim failed for a reason that can pass, so that a
 * start may try again: the static id held by another (after claim_retries), our clock too far
 * from the ensemble's or the peers', a peer that did not answer its check (or whose node is
 * stale). */
#define SF_REGISTRY_NOT_YET (-6)
/* Waits for the session (up to the session timeout, at least 5 s), checks the peers (unless
 * skipped), claims the worker id (static or automatic), and waits until the clock is past the
 * timestamp recorded for it. On success *worker_id is the id held and *floor_ms the recorded
 * timestamp (-1 if none). Blocks. Fails with -1 (a check that cannot pass failed, or
 * stopped), SF_REGISTRY_UNREACHABLE, SF_REGISTRY_ZK_FAILED, SF_REGISTRY_NOT_YET or
 * SF_REGISTRY_ALL_TAKEN, with err filled;
 * after the first two it may be called again (it waits on for the session the client is
 * still bringing up, or opens a new one when it expired). sf_registry_cancel makes it return
 * -1 at once with "stopped" in err, leaving no worker node behind.
 *
 * An automatic claim queues (ZooKeeper's lock recipe under lock_path) and its place in the
 * queue picks its id: with more ids free than claimants ahead of it, it takes the free id
 * at its place at once (a lone claimant takes the lowest free one), so that claimants
 * coming together claim in parallel; with fewer (scarce), it waits its turn, so ids go to
 * claimants in the order they came. The worker node's ephemeral create is the claim
 * whatever the queue says: one holder per id. registry_claim.c says how. */
int sf_registry_claim(sf_registry *r, int64_t *worker_id, int64_t *floor_ms, char *err,
                      size_t errlen);

/* One path an automatic claim may take its id under: the worker_id_path (its lock and state
 * paths derived from it), the datacenter id of its holders, and our node's data there. */
typedef struct sf_registry_place {
    const char *worker_id_path;
    int64_t datacenter_id;
    const char *host_port;
} sf_registry_place;

/* sf_registry_claim of an automatic id over several places (an automatic datacenter), on one
 * session, walking them from places[first] in order (wrapping): a place whose ids are all
 * taken is passed over at the cost of one listing; one with fewer ids free than claimants
 * queued ahead is left for later, since another may have ids to spare; only when none has
 * does the claim come back to the first such place and wait its turn there. *chosen is the
 * index of the place claimed under (or last tried). For a registry made with an automatic
 * id, without lock_path or state_path of its own; the registry then claims again (after a
 * fence) under the place it holds. Fails as sf_registry_claim does; SF_REGISTRY_ALL_TAKEN
 * when every place is full. */
int sf_registry_claim_any(sf_registry *r, const sf_registry_place *places, int n, int first,
                          int *chosen, int64_t *worker_id, int64_t *floor_ms, char *err,
                          size_t errlen);

/* Renews the lease until serving may begin (see above; at most T + REPORT), reports serving
 * (or not) through on_state, and starts the registry's thread, which renews and reports
 * every later transition (session expired, disconnected too long, node lost, lease not
 * renewed, claimed again) and, while not serving, tries again with a backoff of 100 ms
 * doubling to 5 s until it holds an id again.
 *
 * A renewal is one conditional write, sent every sf_registry_renew_ms (or state_interval_ms
 * if shorter) while earlier ones may be in flight: multi{ setData(our worker node, same
 * data, its version), setData(state_path/<id>, max(recorded, now, last id), its version) },
 * each version the one the renewal before it leaves. A write, because a follower cut off
 * from the leader still answers reads from its stale copy for up to syncLimit x tickTime
 * while the leader expires our session; a write is forwarded to the leader, which refuses it
 * for an expired session. The versions make it fail when anyone else changed either node
 * (and every renewal behind a failed one fails too: none is sent until they are answered),
 * and the result must show the worker node owned by our session. The lease lasts
 * sf_registry_lease_ms from its anchor, a moment taken before an earlier write was sent. The
 * same write records the last timestamp, so it never lowers it and never lands after the
 * node stopped being ours. */
int sf_registry_watch(sf_registry *r, char *err, size_t errlen);

/* The id held now, or -1 while none is. */
int64_t sf_registry_worker_id(sf_registry *r);

/* How many of the SF_REGISTRY_MAX_WORKERS ids under worker_id_path anyone holds, as last
 * read: a watch on the path's children, set at the claim, reads them again (from the
 * registry's thread, at most once a second) after every change, so this costs nothing per
 * id. -1 before the first read. Thread-safe, lock-free. */
int sf_registry_worker_ids_taken(sf_registry *r);

/* Copies the worker_id_path the registry claims under (or last tried) into out. */
void sf_registry_worker_id_path(sf_registry *r, char *out, size_t outlen);

/* Copies into out (at most max) the "host:port" of each peer under worker_id_path that
 * serves Thrift (not ours, not an embedded holder), for the live clock checks: the holders
 * the watch above keeps, each one's node data read once (again only when its node may have
 * been replaced), so a round costs no request while the fleet does not change; before the
 * watch's first listing, the path is listed now. From any thread: it reads through the
 * current session, which a new session waits for. Returns how many, or -1 with err filled
 * while not connected or when the path cannot be listed. */
int sf_registry_list_peers(sf_registry *r, char (*out)[SF_REGISTRY_PEER_MAX], int max,
                           char *err, size_t errlen);

/* The session timeout ZooKeeper granted, in ms. */
int sf_registry_session_timeout_ms(sf_registry *r);

/* Why the registry does not serve now (NONE while it does), for an operator's figures. */
typedef enum sf_registry_cause {
    SF_REGISTRY_CAUSE_STARTING = 0, /* no lease yet: connecting, claiming, the first renewal */
    SF_REGISTRY_CAUSE_NONE,         /* serving */
    SF_REGISTRY_CAUSE_UNREACHABLE,  /* fenced, and no connection to ZooKeeper now */
    SF_REGISTRY_CAUSE_EXPIRED,      /* fenced by the session's expiry; claiming on a new one */
    SF_REGISTRY_CAUSE_LEASE,        /* fenced: connected, but no renewal confirmed in time */
    SF_REGISTRY_CAUSE_NODE_LOST,    /* fenced: our worker node is gone or another session's */
    SF_REGISTRY_CAUSE_CLAIM,        /* claiming again failed; retrying */
    SF_REGISTRY_CAUSE_FLOOR,        /* waiting for our clock to pass the id's recorded floor */
    SF_REGISTRY_CAUSE_STOPPING      /* cancelled or closing */
} sf_registry_cause;

typedef enum sf_registry_session {
    SF_REGISTRY_SESSION_CONNECTING,   /* a new session asked for, not established yet */
    SF_REGISTRY_SESSION_CONNECTED,
    SF_REGISTRY_SESSION_DISCONNECTED, /* the connection dropped; the session may live on */
    SF_REGISTRY_SESSION_EXPIRED       /* the session is gone; a new one is to be asked for */
} sf_registry_session;

typedef struct sf_registry_health {
    sf_registry_cause cause;
    sf_registry_session session;
    uint64_t reconnects;  /* connections that came up again after the first, any session */
    uint64_t expirations; /* sessions ZooKeeper expired (or whose credential it refused) */
} sf_registry_health;

/* The cause and the session now, and the counts since the registry was made. Thread-safe. */
void sf_registry_get_health(sf_registry *r, sf_registry_health *out);

/* The renewals' round trips and counts so far, with the session timeout and the round trip
 * limit now. Thread-safe. */
void sf_registry_get_renewal_stats(sf_registry *r, sf_registry_renewal_stats *out);

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
