/* snowflake_zk.h -- libsnowflake-zk: Snowflake ids made in process under a worker id held in
 * ZooKeeper, for programs that embed the generator instead of calling snowflaked.
 *
 * sfz_start claims a worker id under worker_id_path (or, with an automatic datacenter, under
 * one of datacenter_paths with a free id) exactly as snowflaked does: snowflaked
 * registers through this library (the original's ephemeral nodes, the automatic claim queue,
 * the lease renewed by conditional writes, the floor recorded for the next holder). Then
 * sfz_next_id hands out libsnowflake's ids only while that lease holds: never after it ran
 * out, also when the whole process was frozen (SIGSTOP, a suspended machine) and resumed.
 * While fenced, calls fail with SFZ_ERR_FENCED and the handle claims again on its own.
 *
 * An embedded holder's node reads "embedded pid=<pid> host=<host> datacenter=<id>": peers
 * and snowflake-zk know it serves no Thrift and check the datacenter it states. Its own peer
 * checks cover what the nodes say; snowflaked's nodes are queried only through a
 * query_peer function the program gives (snowflaked gives its Thrift client).
 *
 * The threads a handle starts (and the ZooKeeper client's) block every signal but the faults
 * (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS): a signal sent to the process is
 * handled on one of the program's own threads, whatever its handler needs there.
 *
 * Conventions: functions that can fail return SFZ_OK (0) or a negative SFZ_ERR_* code and,
 * when given an sfz_error, fill it with a message a person can act on. Link with
 * `pkg-config --libs snowflake-zk`. */
#ifndef SNOWFLAKE_ZK_H
#define SNOWFLAKE_ZK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <snowflake.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: libsnowflake's, and the registry's. */
enum {
    SFZ_OK = SF_OK,
    SFZ_ERR_ARG = SF_ERR_ARG,                 /* a bad option; the message names its range */
    SFZ_ERR_CLOCK_BACKWARDS = SF_ERR_CLOCK_BACKWARDS, /* the original's InvalidSystemClock */
    SFZ_ERR_NOMEM = SF_ERR_NOMEM,
    SFZ_ERR_CLOCK = SF_ERR_CLOCK,             /* the clock is unusable */
    SFZ_ERR_FENCED = -20,      /* no lease held now (the message says why): retry later */
    SFZ_ERR_UNREACHABLE = -21, /* sfz_start: ZooKeeper did not answer, or failed a request
                                  of the claim (connection lost or timed out), every try */
    SFZ_ERR_CLAIM = -22,       /* sfz_start: no worker id could be claimed (every one taken,
                                  or a peer check failed): trying again changes nothing */
    SFZ_ERR_STOPPED = -23,     /* sfz_start: sfz_cancel was called */
    SFZ_ERR_FORKED = -24       /* the handle belongs to another process: this one is a
                                  fork() of the one that made it (see "Processes") */
};

#define SFZ_ERROR_MAX 1024

typedef struct sfz_error {
    int code;
    int64_t behind_ms; /* for SFZ_ERR_CLOCK_BACKWARDS: how far the clock went back */
    size_t discarded;  /* for SFZ_ERR_FENCED: ids made, then fenced before being handed
                          out (counted, never returned) */
    char message[SFZ_ERROR_MAX];
} sfz_error;

/* What a handle is doing now. */
typedef struct sfz_state {
    bool serving;          /* ids are handed out now (the lease holds) */
    int64_t worker_id;     /* the id held, or the one last held, or -1 before the first claim */
    int64_t datacenter_id; /* the option's */
    char reason[SFZ_ERROR_MAX]; /* while not serving: why, e.g. "disconnected from ZooKeeper" */
} sfz_state;

/* Why a handle does not serve, as a small fixed set for an operator's figures and alerts
 * (sfz_state's reason says it in words, for a person). */
typedef enum sfz_reason {
    SFZ_REASON_NONE = 0,              /* serving */
    SFZ_REASON_STARTING,              /* no lease yet: claiming, startup_sleep_ms, first renewal */
    SFZ_REASON_ZOOKEEPER_UNREACHABLE, /* fenced, and no connection to ZooKeeper now */
    SFZ_REASON_SESSION_EXPIRED,       /* fenced by the session's expiry; claiming on a new one */
    SFZ_REASON_LEASE_UNCONFIRMED,     /* connected, but no renewal was confirmed in time (or the
                                         clock ran past the timestamps the lease reserved) */
    SFZ_REASON_WORKER_NODE_LOST,      /* our worker node is gone or another session's */
    SFZ_REASON_CLAIM_FAILED,          /* claiming again failed (ids taken, peer checks): retrying */
    SFZ_REASON_WAITING_FOR_FLOOR,     /* our clock is behind the floor recorded for the id */
    SFZ_REASON_CLOCK_SKEW,            /* the live clock check: too far from the peers' clocks */
    SFZ_REASON_STOPPING,              /* sfz_shut, or the handle is stopping */
    SFZ_REASONS                       /* how many there are */
} sfz_reason;

/* The ZooKeeper session as the handle sees it. */
typedef enum sfz_session {
    SFZ_SESSION_CONNECTING = 0, /* a new session asked for, not established yet */
    SFZ_SESSION_CONNECTED,
    SFZ_SESSION_DISCONNECTED,   /* the connection dropped; the session may live on */
    SFZ_SESSION_EXPIRED,        /* the session is gone; a new one is being asked for */
    SFZ_SESSIONS
} sfz_session;

typedef struct sfz_health {
    int reason;                /* an sfz_reason; SFZ_REASON_NONE while serving */
    int64_t since_ms;          /* Unix ms: when the handle last began or stopped serving */
    int session;               /* an sfz_session */
    uint64_t reconnects;       /* connections to ZooKeeper that came up again after the first */
    uint64_t sessions_expired; /* sessions ZooKeeper expired (or whose credential it refused) */
    int start_tries;           /* while starting: the tries of the start so far (the one under
                                  way included); 0 once it returned */
    int64_t next_try_ms;       /* while starting and waiting between tries: Unix ms of the
                                  next; else 0 */
} sfz_health;

/* Asks the holder at host_port (a program serving the Snowflake Thrift service there, e.g.
 * snowflaked) for its worker id, datacenter id and clock (Unix ms). Returns 0; 1 when
 * nothing listens there (it is starting, fenced or gone); -1 when it does not answer; err
 * (errlen bytes) says why. */
typedef int (*sfz_peer_fn)(void *ctx, const char *host_port, int64_t *worker_id,
                           int64_t *datacenter_id, int64_t *timestamp_ms, char *err,
                           size_t errlen);

/* Told of every transition (and of a new reason while fenced). The handle makes its
 * callbacks (this and log) from a thread of its own, one at a time in the order they came,
 * never from the thread that renews the lease: one that takes its time (a log on a stalled
 * disk, an on_state that waits for a port) delays only the callbacks after it, never the
 * lease, and the ids are fenced or served at the transition itself, not when the callback
 * runs. At most SFZ_CALLBACKS_QUEUED wait; a log line beyond that is dropped (counted in a
 * warning once there is room), a state never is (the newest waiting one is replaced). Must
 * not call sfz_stop, which waits for the callbacks queued before it. */
typedef void (*sfz_state_fn)(void *ctx, const sfz_state *state);
#define SFZ_CALLBACKS_QUEUED 64

/* Messages for the operator: level is "error", "warning" or "info". NULL = standard error
 * (written from the callbacks' thread too). */
typedef void (*sfz_log_fn)(void *ctx, const char *level, const char *message);

/* What a fork() child does with a handle made before the fork (sfz_options.on_fork; see
 * "Processes" below). */
enum {
    SFZ_ON_FORK_REFUSE = 0, /* every call in the child is refused (SFZ_ERR_FORKED) */
    SFZ_ON_FORK_CLAIM = 1   /* the child claims a worker id of its own, with the handle's
                               options, at its first id call or sfz_claim_after_fork */
};

/* X(field, min, max, default) for every integer option. */
#define SFZ_INT_OPTIONS(X)                                                                  \
    X(session_timeout_ms, 1000, 600000, 10000) /* asked of ZooKeeper */                     \
    X(start_timeout_ms, 0, 86400000, 300000) /* how long a start keeps trying a failure \
                                           that can pass (see sfz_start); 0 = for ever */ \
    X(start_retry_wait_ms, 0, 60000, 500) /* before the first retry, doubling, at most 30 s */ \
    X(claim_retries, 0, 100, 2)         /* a taken static id is tried this many more times \
                                           within one try of the start */                \
    X(claim_retry_wait_ms, 0, 600000, 10000)                                                \
    X(state_interval_ms, 100, 60000, 2000) /* the last timestamp is recorded this often */ \
    X(startup_sleep_ms, 0, 600000, 0)   /* after the claim, wait this long before serving */ \
    X(max_peer_skew_ms, 0, 600000, 0)   /* refuse ids while our clock is this far from the \
                                           peers' (needs query_peer); 0 = off */         \
    X(on_fork, SFZ_ON_FORK_REFUSE, SFZ_ON_FORK_CLAIM, SFZ_ON_FORK_REFUSE) /* above */

typedef struct sfz_options {
    const char *zookeeper;      /* "host:port,host:port"; required */
    const char *auth;           /* "user:password" for digest auth and ACLs, or NULL */
    const char *worker_id_path; /* default /snowflake-servers; the lock and state paths are
                                   worker_id_path + "-locks" and + "-state" */
    int64_t worker_id;          /* 0..31, or -1 (the default) for a free one: the lowest,
                                   or the next ones up when others claim at the same time */
    int64_t datacenter_id;      /* 0..31, default 0; or -1 with datacenter_paths */
    const char *datacenter_paths; /* with datacenter_id -1 (automatic): "D=/path,D=/path"
                                   (D 0..31, each its own path, at most 32, no blanks, no
                                   empty entry; no path, path-locks or path-state of one
                                   entry is, or is under, one of another's): a free
                                   (datacenter, worker) pair over them, starting at one of
                                   the datacenters chosen at random and going on to the next
                                   with a free id, on one ZooKeeper session; the paths replace
                                   worker_id_path, and worker_id must be -1 */
    int64_t epoch_ms;           /* default SF_TWITTER_EPOCH_MS; one per worker path: the
                                   first holder records it there, and a claim with
                                   another is refused (SFZ_ERR_CLAIM, naming both) */
    int64_t max_clock_backward_wait_ms; /* 0..60000, as libsnowflake's; default 0 */
    bool random_first_sequence; /* as libsnowflake's; default false */
    const char *holder;         /* node data; NULL = "embedded pid=<pid> host=<host>
                                   datacenter=<id>"; a program that serves the Thrift
                                   service gives its "host:port" instead */
    sfz_peer_fn query_peer;     /* optional: the original's start-up checks of the peers
                                   that serve Thrift (worker id, datacenter, clock); NULL
                                   checks only the datacenters embedded holders' nodes state */
    void *peer_ctx;
    bool skip_sanity_checks;    /* no peer check, and no check of our clock against
                                   ZooKeeper's before a claim */
    bool skip_unreachable_peers; /* a peer that does not answer is logged, not fatal */
#define SFZ_OPTION_FIELD(field, lo, hi, dflt) int field;
    SFZ_INT_OPTIONS(SFZ_OPTION_FIELD)
#undef SFZ_OPTION_FIELD
    sfz_state_fn on_state;      /* optional */
    void *state_ctx;
    sfz_log_fn log;             /* optional */
    void *log_ctx;
} sfz_options;

typedef struct sfz sfz;

/* Sets the ZooKeeper C client library's own logging, for the whole process: its warnings
 * when verbose, else nothing (it would log every refused reconnect while ZooKeeper is down).
 * Call before sfz_start; without it the library's default applies. */
void sfz_set_client_logging(bool verbose);

/* Fills the defaults above; zookeeper stays NULL. */
void sfz_options_init(sfz_options *opts);

/* Checks options without connecting: SFZ_OK, or SFZ_ERR_ARG naming the option and its range. */
int sfz_options_check(const sfz_options *opts, sfz_error *err);

/* Connects, checks, claims a worker id and waits until the clock is past the timestamp
 * recorded for it; then the handle serves and renews its lease on a thread of its own.
 * A try that fails for a reason that can pass is tried again, for start_timeout_ms from the
 * start (0: for ever): no ZooKeeper server answers, ZooKeeper fails a request of the claim
 * (a connection lost or timed out, a session expired), every worker id is taken (or the
 * static one, after claim_retries), our clock is too far from ZooKeeper's or the peers', or
 * a peer does not answer its check. Between tries it waits about start_retry_wait_ms,
 * doubling up to 30 s, each wait drawn from its upper half so that a fleet starting together
 * spreads out; a try after ZooKeeper did not answer comes at once when the session the
 * client kept trying comes up. It logs once per try (a warning naming the failure, the try
 * and when the next comes) and tells on_state "starting: ..." the same; sfz_get_health
 * counts the tries. When the time is up it fails with SFZ_ERR_UNREACHABLE (ZooKeeper) or
 * SFZ_ERR_CLAIM (ids taken, a check), saying how often and how long it tried. A try under
 * way then ends first: one that waits for ZooKeeper to answer waits the longer of 5 s and
 * session_timeout_ms, so a start_timeout_ms below that is overrun by up to the difference.
 * What cannot pass fails at once with SFZ_ERR_CLAIM: a refused credential, an epoch other
 * than the one recorded for the path, a peer that reports another datacenter or worker id.
 * Blocks until then; sfz_cancel from another thread makes it fail with SFZ_ERR_STOPPED.
 * On success *out is the handle. */
int sfz_start(const sfz_options *opts, sfz **out, sfz_error *err);

/* Makes a blocked sfz_start return SFZ_ERR_STOPPED soon, leaving no node behind. For a handle
 * not yet returned, pass the one from sfz_prepare. Only for a start: on a handle whose start
 * returned it does nothing (a started handle is stopped with sfz_stop). */
void sfz_cancel(sfz *h);

/* Like sfz_start in two steps, so that another thread can sfz_cancel the start: sfz_prepare
 * checks the options and returns the handle (not serving); sfz_run does the rest. On a
 * failed sfz_run the handle is still to be freed with sfz_stop. */
int sfz_prepare(const sfz_options *opts, sfz **out, sfz_error *err);
int sfz_run(sfz *h, sfz_error *err);

/* The most ids one sfz_next_ids call makes (snowflaked's largest max_batch_size): at 4,096
 * ids per millisecond such a call takes at least 245 ms, holding the worker (other calls
 * wait) and keeping sfz_stop waiting meanwhile. */
#define SFZ_MAX_IDS 1000000

/* One id, or count ids strictly increasing (count 1..SFZ_MAX_IDS, else SFZ_ERR_ARG).
 * Thread-safe. Returns SFZ_OK, SFZ_ERR_FENCED while no lease is held (or once sfz_stop
 * began), SFZ_ERR_CLOCK_BACKWARDS / SFZ_ERR_CLOCK, or SFZ_ERR_FORKED in a process the handle
 * does not belong to. The worker id and datacenter id the ids were made under are in each
 * id: sf_decode(id, epoch_ms, ...) gives them, race-free (sfz_worker_id may already name the
 * next id held by the time it is read). */
int sfz_next_id(sfz *h, int64_t *id, sfz_error *err);
int sfz_next_ids(sfz *h, int64_t *ids, size_t count, sfz_error *err);

/* The state now (for a health check): serving only while the lease holds, also before the
 * handle's own thread has noticed that it ran out. */
void sfz_get_state(sfz *h, sfz_state *out);

/* The worker id held now (or last held: a fenced handle keeps it until it claims another),
 * and its datacenter id; -1 before the first claim. A lock-free read, cheap enough for
 * every request (sfz_get_state copies the whole state under a lock). Not a label for ids
 * made by another call: the handle may claim another id in between; decode the id itself
 * (see sfz_next_ids). */
int64_t sfz_worker_id(sfz *h);
int64_t sfz_datacenter_id(sfz *h);

/* How many of the 32 worker ids under the path the handle claimed in are held now, by any
 * holder, for an operator's figures: a watch on the path's children reads them again within
 * a second of every change ZooKeeper reports, so ids pay nothing for it, and a fleet that
 * does not change costs ZooKeeper nothing. -1 before the first count.
 * path (pathlen bytes), when not NULL, receives that path ("" while none). */
int sfz_worker_ids_taken(sfz *h, char *path, size_t pathlen);

/* The state as figures: why not serving (a fixed set), since when, the session, and its
 * reconnects and expiries since sfz_prepare. For alerts and dashboards. */
void sfz_get_health(sfz *h, sfz_health *out);

/* The names of a reason and a session state in lower case with underscores
 * ("zookeeper_unreachable", "connected"), as labels; "unknown" for any other value. */
const char *sfz_reason_name(int reason);
const char *sfz_session_name(int session);

/* The live clock check: with query_peer given, the handle asks up to SFZ_SKEW_SAMPLE peers
 * that serve Thrift for their clock every SFZ_SKEW_INTERVAL_MS, on a thread of its own, each
 * answer corrected by half its round trip. The peers are those the watch above keeps (each
 * holder's node read once), so the rounds cost ZooKeeper nothing while the fleet does not
 * change. Its estimate of our skew is the median of the
 * offsets with our own (0) among them (of two middle values, the one nearer 0), so that one
 * node whose clock drifts is out of line and the others are not; with max_peer_skew_ms set,
 * a skew beyond it refuses ids (SFZ_ERR_FENCED, saying so) until a later round is within
 * it, or no peer answers (nothing to compare with, as at start-up). */
#define SFZ_SKEW_SAMPLE 3
#define SFZ_SKEW_INTERVAL_MS 1000
/* The histogram's upper bounds in ms (each bucket holds the offsets <= its bound and above
 * the one before; one more bucket holds those above the last). */
#define SFZ_SKEW_BUCKETS 11
#define SFZ_SKEW_BOUNDS_MS { -10000, -1000, -100, -10, -1, 0, 1, 10, 100, 1000, 10000 }

typedef struct sfz_skew {
    bool known;            /* a round had an answer: skew_ms is an estimate */
    bool fenced;           /* ids refused: |skew_ms| > max_peer_skew_ms */
    int64_t skew_ms;       /* our clock minus the peers', from the last round with answers */
    int64_t peers;         /* peers that answered in the last round */
    uint64_t samples;      /* every answer so far */
    uint64_t failures;     /* every peer that did not answer */
    int64_t sum_ms;        /* of every offset (our clock minus a peer's) */
    uint64_t buckets[SFZ_SKEW_BUCKETS + 1]; /* the offsets, per bound (not cumulative) */
} sfz_skew;

/* The live clock check's figures now (all zero without query_peer). */
void sfz_get_skew(sfz *h, sfz_skew *out);

/* The generator's counters (libsnowflake's) for the worker id held now, or zeros. */
void sfz_get_stats(sfz *h, sf_worker_stats *out);

/* The lease's renewals: a conditional write to ZooKeeper every T/8 (T the session timeout
 * granted), several in flight. The lease is kept through any round trip (send to the
 * leader's confirmation) up to round_trip_limit_ms, 7/32 of T (656 ms with T = 3 s, 2.19 s
 * with 10 s); beyond it, ids stop between confirmations. The manual's "The lease" derives
 * it; watch the histogram to see the limit coming. The histogram's upper bounds in ms (each
 * bucket holds the round trips <= its bound and above the one before; one more bucket holds
 * those above the last): they resolve T/8 to T/2 for every T from 1 s to 60 s. */
#define SFZ_RENEWAL_BUCKETS 32
#define SFZ_RENEWAL_BOUNDS_MS                                                               \
    { 1, 2, 5, 10, 25, 50, 100, 125, 150, 200, 250, 300, 400, 500, 625, 750, 1000, 1250,   \
      1500, 2000, 2500, 3000, 4000, 5000, 6000, 7500, 10000, 12500, 15000, 20000, 25000,   \
      30000 }

typedef struct sfz_renewals {
    int64_t session_timeout_ms;  /* granted by ZooKeeper (0 before the start claimed an id) */
    int64_t round_trip_limit_ms; /* the longest round trip the lease is kept through */
    uint64_t confirmed;          /* renewals ZooKeeper's leader confirmed */
    uint64_t failed;             /* renewals that got no confirmation */
    int64_t sum_ms;              /* of the confirmed ones' round trips */
    int64_t last_ms;             /* the last confirmed one's, -1 before the first */
    uint64_t buckets[SFZ_RENEWAL_BUCKETS + 1]; /* the round trips, per bound (not cumulative) */
} sfz_renewals;

/* The renewals' figures now. Thread-safe; cheap (a copy under a lock). */
void sfz_get_renewals(sfz *h, sfz_renewals *out);

/* A descriptor that becomes readable on every transition: poll it, then call
 * sfz_read_state_fd (which makes it unreadable again until the next transition) and
 * sfz_get_state. Owned by the handle. */
int sfz_state_fd(sfz *h);
void sfz_read_state_fd(sfz *h);

/* Refuses every id from now on with reason (SFZ_ERR_FENCED), whatever the lease: for a
 * program that drains its requests before sfz_stop. The id stays held until sfz_stop. */
void sfz_shut(sfz *h, const char *reason);

/* Refuses every call from now on (ids with SFZ_ERR_FENCED), waits for the calls inside the
 * handle to return, records the last timestamp and releases the worker id (the node is
 * deleted; the next holder starts after this handle's last id), then frees the handle.
 * NULL is allowed. In a process the handle does not belong to (a fork() child) it frees
 * that process's copy only: no ZooKeeper request, no thread joined, the parent untouched.
 * With ZooKeeper answering it takes a few round trips. While ZooKeeper does not answer it
 * takes at most: the calls inside (below), then a third of the session timeout for the last
 * record (unconfirmed by then, it is given up: the next holder waits out the reservation
 * instead of starting right after the last id), then up to 1.5 s in the ZooKeeper client's
 * close (its wait for the server's answer), plus, if the handle was claiming again at that
 * moment, the ZooKeeper request it was in (the client's own timeout, 2/3 of the session
 * timeout; a serving handle is in none). */
void sfz_stop(sfz *h);

/* Threads. Every call but sfz_stop may be made from any thread, at the same time as any
 * other; a callback (on_state, log, query_peer) must not call sfz_stop. sfz_stop may run
 * while other threads are inside calls on the handle: it refuses new ones (ids with
 * SFZ_ERR_FENCED, "stopping"; the other calls answer as for a handle that holds nothing)
 * and waits for those inside to return before it frees anything (at no locked instruction
 * on the id path where the kernel has membarrier(2)). What it cannot guard is a
 * call that begins after it returned (the handle is gone): stop starting calls before
 * sfz_stop returns, as with any free. Once, and not while sfz_run runs on the handle
 * (sfz_cancel it and wait for sfz_run to return).
 *
 * Processes. A handle belongs to the process that made it (sfz_prepare or sfz_start). A
 * child made by fork() shares the parent's worker id, its lease and its last timestamp: ids
 * from both would repeat. So in the child the handle never answers with the parent's pair,
 * from the moment of the fork (in a pthread_atfork child handler that runs before the
 * library's too); what it does instead is on_fork's:
 *   - SFZ_ON_FORK_REFUSE (the default): every call is refused at once: SFZ_ERR_FORKED
 *     ("this handle was started by pid N; ... start a handle of its own after fork()"), or,
 *     for the calls that return no code, nothing held (worker id -1, not serving with that
 *     reason, no figures, sfz_state_fd -1).
 *   - SFZ_ON_FORK_CLAIM: the child's first id call (or sfz_claim_after_fork, e.g. from a
 *     post-fork hook) claims a worker id of the child's own with the handle's options: its
 *     own ZooKeeper session, claim and floor, as sfz_start does (start_timeout_ms bounds it).
 *     Calls wait for that claim and fail as a start fails when it does (the next id call
 *     tries again); the calls that return no code answer, until the claim, as for a handle
 *     that has not started. Once it serves, the handle is the child's: sfz_stop in the child
 *     releases the child's pair.
 * Whatever the child does (calls, sfz_stop, exit with or without atexit handlers, exec), the
 * parent's session, worker node, floor, descriptors and threads are untouched: the child
 * never writes to the parent's ZooKeeper connection or closes its session; the parent's
 * client memory is left as it is in the child (no call of the client is safe there).
 * Every descriptor the library opens is close-on-exec. A pre-fork server either uses
 * SFZ_ON_FORK_CLAIM (each worker then holds a pair, and so does the parent if it started
 * the handle; prepare it there without sfz_run to hold none) or starts a handle in each
 * worker. The check costs one relaxed load and a compare per call; a child made without
 * fork() or pthread_atfork's handlers (a raw clone() system call) is not seen. */

/* With on_fork = SFZ_ON_FORK_CLAIM, in a fork() child of the process the handle was made in
 * (or whose pair it holds): claims the child's own worker id now, as the child's first id
 * call would, waiting for it; SFZ_OK once it serves, else the start's failure. SFZ_OK at
 * once where the handle already belongs to this process; SFZ_ERR_FORKED with
 * SFZ_ON_FORK_REFUSE. */
int sfz_claim_after_fork(sfz *h, sfz_error *err);

#ifdef __cplusplus
}
#endif

#endif /* SNOWFLAKE_ZK_H */
