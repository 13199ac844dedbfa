/* registry_options.h -- the registry's settings: the struct and its callbacks, each integer
 * setting's range and default named once, the defaults and the check. Plain C without
 * ZooKeeper, so that the settings file's reader can hold and check them. */
#ifndef SF_REGISTRY_OPTIONS_H
#define SF_REGISTRY_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for any message the registry writes into a caller's err buffer. */
#define SF_REGISTRY_ERR_MAX 2048

/* X(field, min, max, default) for every integer setting:
 *   session_timeout_ms   asked of ZooKeeper, which may negotiate another;
 *   claim_retries        a taken static id is tried this many more times;
 *   claim_retry_wait_ms  between those tries;
 *   state_interval_ms    the last timestamp is recorded at least this often (it rides on
 *                        every lease renewal);
 *   max_peer_skew_ms     ids are refused while the clock is this far from the peers' (the
 *                        live check, libsnowflake-zk's); 0 = off. */
#define SF_REGISTRY_INT_OPTIONS(X)                                                             \
    X(session_timeout_ms, 1000, 600000, 10000)                                                 \
    X(claim_retries, 0, 100, 2)                                                                \
    X(claim_retry_wait_ms, 0, 600000, 10000)                                                   \
    X(state_interval_ms, 100, 60000, 2000)                                                     \
    X(max_peer_skew_ms, 0, 600000, 0)

/* SF_REGISTRY_MIN_<field> and SF_REGISTRY_MAX_<field>, for the settings file's key table. */
enum {
#define SF_REGISTRY_RANGE(field, lo, hi, dflt) \
    SF_REGISTRY_MIN_##field = (lo), SF_REGISTRY_MAX_##field = (hi),
    SF_REGISTRY_INT_OPTIONS(SF_REGISTRY_RANGE)
#undef SF_REGISTRY_RANGE
};

/* Room for one peer's node data, "host:port". */
#define SF_REGISTRY_PEER_MAX 512

/* Asks the node at host_port for its ids and clock. Returns 0; SF_REGISTRY_PEER_REFUSED
 * with err filled when nothing listens there (a node not serving closes its port: it is
 * starting, fenced or gone); or -1 with err filled (unreachable, or no answer within its
 * timeout). */
#define SF_REGISTRY_PEER_REFUSED 1
typedef int (*sf_registry_peer_fn)(void *ctx, const char *host_port, int64_t *worker_id,
                                   int64_t *datacenter_id, int64_t *timestamp_ms, char *err,
                                   size_t errlen);

/* Told of every transition: serving = ids may be handed out as worker_id, none at or before
 * floor_ms (-1 = none) and none after reserved_until_ms (Unix ms; the reservation recorded
 * in ZooKeeper), until CLOCK_BOOTTIME reaches valid_until_boot_ms (the lease that came with
 * the claim); !serving = stop at once, reason says why (worker_id is the id last held or -1).
 * While not serving it is told again whenever the reason changes, so the reason is always
 * the current one; a registry stopped while serving says so (not serving) before it records
 * the last timestamp. Called from the registry's own thread (the first call from
 * sf_registry_watch); must not call back into the registry. */
typedef void (*sf_registry_state_fn)(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                                     int64_t valid_until_boot_ms, int64_t reserved_until_ms,
                                     const char *reason);

/* Told of every renewal while serving: ids valid until CLOCK_BOOTTIME reaches
 * valid_until_boot_ms, none with a timestamp after reserved_until_ms (Unix ms), and no
 * longer unless a later renewal arrives. A renewal is a write the leader confirmed (see
 * sf_registry_watch), so a follower cut off from the leader cannot extend it; the lease also
 * covers a process frozen past its session timeout (a stopped process), which the registry's
 * thread cannot fence because it is frozen too. A lease may also come shorter than the one
 * before (the session timeout was renegotiated lower). Called from the registry's own
 * thread; must not call back into the registry. */
typedef void (*sf_registry_lease_fn)(void *ctx, int64_t valid_until_boot_ms,
                                     int64_t reserved_until_ms);

/* Returns the timestamp (Unix ms) of the last id handed out, or -1 before the first. */
typedef int64_t (*sf_registry_last_ts_fn)(void *ctx);

/* Messages for the operator: level is "error", "warning" or "info". */
typedef void (*sf_registry_log_fn)(void *ctx, const char *level, const char *message);

typedef struct sf_registry_options {
    const char *hosts;              /* "host:port,host:port" */
#define SF_REGISTRY_FIELD(field, lo, hi, dflt) int field;
    SF_REGISTRY_INT_OPTIONS(SF_REGISTRY_FIELD) /* session_timeout_ms, claim_retries, ... */
#undef SF_REGISTRY_FIELD
    const char *worker_id_path;     /* default /snowflake-servers */
    const char *lock_path;          /* NULL = worker_id_path + "-locks" */
    const char *state_path;         /* NULL = worker_id_path + "-state" */
    int64_t worker_id;              /* 0..31, or -1 for an automatic id */
    int64_t datacenter_id;          /* 0..31, compared with every peer's */
    int64_t epoch_ms;               /* the ids' epoch (Unix ms, default Twitter's): one per
                                       worker path, recorded there by the first holder */
    const char *host_port;          /* our node's data, "hostname:port" */
    bool skip_sanity_checks;        /* do not query peers at all */
    bool skip_unreachable_peers;    /* an unreachable peer is logged, not fatal */
    int64_t max_clock_skew_ms;      /* the peers' mean clock vs ours (default 10000) */
    int64_t max_clock_backward_wait_ms; /* with max_clock_skew_ms, bounds the wait for a floor */
    const char *auth;               /* "user:password" for digest auth + ACLs, or NULL */
    sf_registry_peer_fn query_peer; /* NULL: embedded holders' nodes are checked, no peer
                                       is queried (the embedded library has no Thrift) */
    void *peer_ctx;
    sf_registry_state_fn on_state;
    void *state_ctx;
    sf_registry_lease_fn on_lease;  /* optional */
    void *lease_ctx;
    sf_registry_last_ts_fn last_timestamp; /* optional */
    void *last_ts_ctx;
    sf_registry_log_fn log;         /* optional; NULL = standard error */
    void *log_ctx;
} sf_registry_options;

/* Fills the defaults: those of SF_REGISTRY_INT_OPTIONS, /snowflake-servers, an automatic
 * worker id, a clock skew of 10 s; hosts, host_port and the callbacks stay NULL. */
void sf_registry_options_init(sf_registry_options *opts);

/* True when auth is empty (none) or user:password with a user. */
bool sf_registry_auth_valid(const char *auth);

/* Checks the settings: hosts named, the paths valid ZooKeeper paths, worker_id 0..31 or -1,
 * auth user:password, every integer setting within its range. False with err naming the
 * bad setting and what is allowed. */
bool sf_registry_options_check(const sf_registry_options *opts, char *err, size_t errlen);

#endif
