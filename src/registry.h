/* registry.h -- claims a worker id in ZooKeeper, guards it (fencing) and records its last timestamp.
 *
 * The layout is the original Snowflake's, so legacy nodes and their tools share one ensemble:
 * under worker_id_path each live node owns an EPHEMERAL child named by its worker id in
 * decimal, holding "hostname:port". Beyond the original:
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

#define SF_REGISTRY_MAX_WORKERS 32
#define SF_REGISTRY_ERR_MAX 2048

/* Asks the node at host_port for its ids and clock. Returns 0, or -1 with err filled
 * (the peer is unreachable or does not answer within its timeout). */
typedef int (*sf_registry_peer_fn)(void *ctx, const char *host_port, int64_t *worker_id,
                                   int64_t *datacenter_id, int64_t *timestamp_ms, char *err,
                                   size_t errlen);

/* Milliseconds on CLOCK_BOOTTIME: the clock of every lease (it goes on counting while
 * the machine is suspended, when CLOCK_MONOTONIC stops). */
int64_t sf_registry_boot_ms(void);

/* Told of every transition after sf_registry_watch(): serving = ids may be handed out as
 * worker_id, none at or before floor_ms (Unix ms; -1 = no floor), until CLOCK_BOOTTIME
 * reaches valid_until_boot_ms (the lease renewed just before serving began); !serving =
 * stop at once, reason says why (worker_id is the id last held, or -1). Called from the
 * registry's own thread; must not call back into the registry. */
typedef void (*sf_registry_state_fn)(void *ctx, bool serving, int64_t worker_id,
                                     int64_t floor_ms, int64_t valid_until_boot_ms,
                                     const char *reason);

/* Told of every renewal of the lease while serving: ids may be handed out until
 * CLOCK_BOOTTIME (ms) reaches valid_until_boot_ms, and no longer unless a later renewal
 * arrives. Each renewal is a round trip to ZooKeeper proving our session and our worker
 * node alive; the lease covers a process frozen past its session timeout (a stopped
 * process or a paused machine), which the registry's thread cannot fence because it is
 * frozen too. Called from the registry's own thread; must not call back into the registry. */
typedef void (*sf_registry_lease_fn)(void *ctx, int64_t valid_until_boot_ms);

/* Returns the timestamp (Unix ms) of the last id handed out, or -1 before the first. */
typedef int64_t (*sf_registry_last_ts_fn)(void *ctx);

/* Messages for the operator: level is "error", "warning" or "info". */
typedef void (*sf_registry_log_fn)(void *ctx, const char *level, const char *message);

typedef struct sf_registry_options {
    const char *hosts;              /* "host:port,host:port" */
    int session_timeout_ms;         /* asked of ZooKeeper; it may negotiate another */
    const char *worker_id_path;     /* default /snowflake-servers */
    const char *lock_path;          /* NULL = worker_id_path + "-locks" */
    const char *state_path;         /* NULL = worker_id_path + "-state" */
    int64_t worker_id;              /* 0..31, or -1 for an automatic id */
    int64_t datacenter_id;          /* 0..31, compared with every peer's */
    const char *host_port;          /* our node's data, "hostname:port" */
    int claim_retries;              /* a taken static id is tried this many more times (2) */
    int claim_retry_wait_ms;        /* between those tries (default: the session timeout) */
    bool skip_sanity_checks;        /* do not query peers at all */
    bool skip_unreachable_peers;    /* an unreachable peer is logged, not fatal */
    int64_t max_clock_skew_ms;      /* the peers' mean clock vs ours (default 10000) */
    int64_t max_clock_backward_wait_ms; /* wait at most this for the recorded timestamp */
    int state_interval_ms;          /* how often the last timestamp is recorded (2000) */
    const char *auth;               /* "user:password" for digest auth + ACLs, or NULL */
    sf_registry_peer_fn query_peer;
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

typedef struct sf_registry sf_registry;

/* Sets the ZooKeeper client library's own logging: its warnings when verbose, else nothing
 * (it would log every refused reconnect while ZooKeeper is down). Call before any other. */
void sf_registry_set_client_logging(bool verbose);

/* Fills the defaults listed above; hosts, host_port and the callbacks stay NULL. */
void sf_registry_options_init(sf_registry_options *opts);

/* Copies the options and connects to ZooKeeper, waiting up to the session timeout for the
 * session. Returns NULL with err filled on a bad option or when no server answers. The
 * client library logs at its own level: set it with sf_registry_set_client_logging() first. */
sf_registry *sf_registry_new(const sf_registry_options *opts, char *err, size_t errlen);

/* Checks the peers (unless skipped), claims the worker id (static or automatic), and waits
 * until the clock is past the timestamp recorded for it. On success *worker_id is the id
 * held and *floor_ms the recorded timestamp (-1 if none). Blocks; call once. */
int sf_registry_claim(sf_registry *r, int64_t *worker_id, int64_t *floor_ms, char *err,
                      size_t errlen);

/* Starts the registry's thread: it reports serving (or not) through on_state at once, then
 * every transition (session expired, disconnected too long, claimed again), and records
 * the last timestamp every state_interval_ms while serving. While serving it renews the
 * lease (on_lease) at least every negotiated session timeout / 6 ms, for 2/3 of the
 * timeout from the moment each round trip was sent; also just before serving begins. */
int sf_registry_watch(sf_registry *r, char *err, size_t errlen);

/* The id held now, or -1 while none is. */
int64_t sf_registry_worker_id(sf_registry *r);

/* The session timeout ZooKeeper granted, in ms. */
int sf_registry_session_timeout_ms(sf_registry *r);

/* Makes a sf_registry_new, sf_registry_claim or wait under way on another thread give up
 * promptly (they return -1, err "stopped"), as on SIGTERM during start-up. Thread-safe. */
void sf_registry_cancel(sf_registry *r);

/* Stops the thread, records the last timestamp, and closes the session so that the
 * ephemeral node disappears at once. Frees r; NULL is allowed. */
void sf_registry_close(sf_registry *r);

#endif /* SF_REGISTRY_H */
