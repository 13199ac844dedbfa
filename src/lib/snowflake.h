/* snowflake.h -- libsnowflake: Twitter Snowflake 64-bit id generation in plain C.
 *
 * An id is ((ms - epoch) << 22) | (datacenter << 17) | (worker << 12) | sequence,
 * generated exactly as the original Scala IdWorker does. This header is the whole
 * public API of the embeddable library; it depends on nothing but libc and pthreads.
 *
 * Conventions: functions that can fail return SF_OK (0) or a negative SF_ERR_*
 * code and, when given an sf_error, fill it with a message a person can act on. */
#ifndef SNOWFLAKE_H
#define SNOWFLAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SF_TWITTER_EPOCH_MS 1288834974657LL

#define SF_WORKER_ID_BITS 5
#define SF_DATACENTER_ID_BITS 5
#define SF_SEQUENCE_BITS 12
#define SF_MAX_WORKER_ID ((1 << SF_WORKER_ID_BITS) - 1)         /* 31 */
#define SF_MAX_DATACENTER_ID ((1 << SF_DATACENTER_ID_BITS) - 1) /* 31 */
#define SF_SEQUENCE_MASK ((1 << SF_SEQUENCE_BITS) - 1)          /* 4095 */
#define SF_WORKER_ID_SHIFT SF_SEQUENCE_BITS                                       /* 12 */
#define SF_DATACENTER_ID_SHIFT (SF_SEQUENCE_BITS + SF_WORKER_ID_BITS)             /* 17 */
#define SF_TIMESTAMP_SHIFT (SF_SEQUENCE_BITS + SF_WORKER_ID_BITS + SF_DATACENTER_ID_BITS) /* 22 */
/* The 41-bit timestamp field covers about 69 years after the epoch. */
#define SF_MAX_TIMESTAMP_DELTA ((1LL << 41) - 1)
/* The latest epoch accepted: 2100-01-01T00:00:00Z (snowflaked's epoch_ms allows no later). */
#define SF_MAX_EPOCH_MS 4102444800000LL

/* Error codes. */
enum {
    SF_OK = 0,
    SF_ERR_ARG = -1,             /* a bad argument; the message names the allowed range */
    SF_ERR_CLOCK_BACKWARDS = -2, /* the original's InvalidSystemClock */
    SF_ERR_NOMEM = -3,
    SF_ERR_CLOCK = -4            /* the clock is unusable (before the epoch, past 41 bits) */
};

#define SF_ERROR_MAX 256

/* Filled by a failing call. behind_ms is set for SF_ERR_CLOCK_BACKWARDS. */
typedef struct sf_error {
    int code;
    int64_t behind_ms;
    char message[SF_ERROR_MAX];
} sf_error;

/* A clock returns the current time in milliseconds since the Unix epoch.
 * A sleep function waits about ms milliseconds. Both may be replaced so that
 * tests drive time exactly; ctx is passed back unchanged. */
typedef int64_t (*sf_clock_fn)(void *ctx);
typedef void (*sf_sleep_fn)(void *ctx, int64_t ms);

/* Worker settings. Start from sf_worker_options_init(), which sets the
 * faithful defaults: Twitter's epoch, the system clock, every extension off. */
typedef struct sf_worker_options {
    int64_t datacenter_id; /* 0..31 */
    int64_t worker_id;     /* 0..31 */
    int64_t epoch_ms;      /* default SF_TWITTER_EPOCH_MS */
    /* Backward clock steps adding up to at most this many ms in one call are waited
     * out (without holding the worker's lock) instead of failing; a larger one still
     * fails. 0 (the default) = always fail. */
    int64_t max_clock_backward_wait_ms;
    /* Start each new millisecond at a random sequence in 0..2047 instead of 0,
     * so that ids taken at low rates spread over id % n. Off by default. */
    bool random_first_sequence;
    sf_clock_fn clock;     /* NULL = the system clock (CLOCK_REALTIME) */
    sf_sleep_fn sleep;     /* NULL = nanosleep */
    void *clock_ctx;
} sf_worker_options;

/* Counters kept by a worker; read them with sf_worker_get_stats(). */
typedef struct sf_worker_stats {
    uint64_t ids_generated;
    uint64_t sequence_waits;        /* waits for the next ms after 4096 ids in one ms */
    uint64_t clock_backward_waits;  /* small backward steps waited out */
    uint64_t clock_backward_errors; /* refusals with SF_ERR_CLOCK_BACKWARDS */
} sf_worker_stats;

typedef struct sf_worker sf_worker;

void sf_worker_options_init(sf_worker_options *opts);

/* Checks options without creating a worker: SF_OK, or SF_ERR_ARG naming the
 * bad field and its allowed range. */
int sf_worker_options_check(const sf_worker_options *opts, sf_error *err);

/* Creates a worker. Returns NULL on a bad option or no memory, with err filled.
 *
 * ONE PROCESS PER WORKER. A worker is its worker id in memory, and fork() copies it: parent
 * and child then make the same ids at the same moments (same worker id, same last timestamp
 * and sequence). The library does not refuse the child's copy: a program that creates its
 * worker and then daemonizes (the parent exits) uses one copy and is right, and which copy
 * goes on is not the library's to know. Use a worker in one process only; a pre-fork
 * server creates one per worker process after the fork, each with its own (datacenter,
 * worker) pair, or uses libsnowflake-zk, whose handle refuses every call in a forked child
 * (SFZ_ERR_FORKED) and claims a pair per process. */
sf_worker *sf_worker_new(const sf_worker_options *opts, sf_error *err);
void sf_worker_free(sf_worker *w);

/* Generates one id into *id. Thread-safe. Returns SF_OK, SF_ERR_CLOCK_BACKWARDS
 * (err->behind_ms says by how much) or SF_ERR_CLOCK. */
int sf_worker_next_id(sf_worker *w, int64_t *id, sf_error *err);

/* Generates count ids into ids[0..count-1], strictly increasing, under one
 * lock acquisition, taking runs of sequence numbers per millisecond. On error
 * no id is returned and the worker has handed out none of them. */
int sf_worker_next_ids(sf_worker *w, int64_t *ids, size_t count, sf_error *err);

/* Like sf_worker_next_ids, but waits out backward clock steps for at most max_wait_ms in
 * all (and never more than max_clock_backward_wait_ms), for callers whose right to hand
 * out ids ends at a deadline. Waits never hold the worker's lock. */
int sf_worker_next_ids_wait_max(sf_worker *w, int64_t *ids, size_t count, int64_t max_wait_ms,
                                sf_error *err);

int64_t sf_worker_worker_id(const sf_worker *w);
int64_t sf_worker_datacenter_id(const sf_worker *w);
int64_t sf_worker_epoch(const sf_worker *w);
/* The worker's max_clock_backward_wait_ms: 0 when it never waits for the clock. */
int64_t sf_worker_max_clock_backward_wait_ms(const sf_worker *w);

/* The timestamp (Unix ms) of the last id handed out, or -1 before the first. */
int64_t sf_worker_last_timestamp(sf_worker *w);

/* Refuses ids until the clock passes ts (Unix ms), e.g. a timestamp recorded
 * by a previous holder of this worker id. Never moves the floor backwards. */
void sf_worker_advance_last_timestamp(sf_worker *w, int64_t ts);

void sf_worker_get_stats(sf_worker *w, sf_worker_stats *out);

/* Test hook, as the original's tests set the sequence field directly. */
void sf_worker_set_sequence(sf_worker *w, int64_t sequence);

/* The system clock in Unix milliseconds. */
int64_t sf_clock_now_ms(void);

/* The fields of an id. */
typedef struct sf_decoded {
    int64_t id;
    int64_t timestamp_ms; /* Unix epoch milliseconds */
    int64_t datacenter_id;
    int64_t worker_id;
    int64_t sequence;
} sf_decoded;

/* Splits an id made with the given epoch. Returns SF_ERR_ARG for a negative id or an
 * epoch outside 0..SF_MAX_EPOCH_MS. */
int sf_decode(int64_t id, int64_t epoch_ms, sf_decoded *out, sf_error *err);

/* Builds an id from fields, refusing out-of-range ones (the inverse of sf_decode). */
int sf_compose(const sf_decoded *fields, int64_t epoch_ms, int64_t *id, sf_error *err);

/* The inclusive id bounds of a time range, for range scans (SQL: WHERE id BETWEEN lo AND
 * hi): *lo is the lowest id any worker can make at from_ms, *hi the highest at to_ms (Unix
 * ms, both inclusive). SF_ERR_ARG naming the bad value and its range when a time is before
 * the epoch or past the 41-bit timestamp's end (epoch + 2^41 - 1), when from_ms > to_ms, or
 * for an epoch outside 0..SF_MAX_EPOCH_MS. */
int sf_id_range(int64_t from_ms, int64_t to_ms, int64_t epoch_ms, int64_t *lo, int64_t *hi,
                sf_error *err);

/* String forms of an id. SF_BASE32 (Crockford's alphabet, 13 characters) and SF_BASE62
 * (0-9A-Za-z, 11 characters) are written fixed width with leading zeros, in alphabets that
 * are in ASCII order, so their byte order (strcmp, a C collation) is the ids' order.
 * SF_BASE58 is bwmarrin/snowflake's form (alphabet 1-9a-km-zA-HJ-NP-Z, no padding: 0 is
 * "1"), interchangeable with its Base58()/ParseBase58(); it does not keep the ids' order
 * (lower case sorts after upper case in ASCII, and shorter strings are smaller ids). */
typedef enum sf_id_base {
    SF_BASE10 = 10,
    SF_BASE32 = 32,
    SF_BASE58 = 58,
    SF_BASE62 = 62
} sf_id_base;

/* Room for any id in any base, with its terminating NUL. */
#define SF_ID_TEXT_MAX 24

/* Writes id (0..INT64_MAX) in base into buf (len bytes, SF_ID_TEXT_MAX is always enough).
 * SF_ERR_ARG for a negative id, an unknown base or too small a buffer. */
int sf_id_encode(int64_t id, sf_id_base base, char *buf, size_t len, sf_error *err);

/* Reads an id written in base: digits of the base alone (no blanks, no sign), leading zeros
 * allowed; base 32 reads both cases and Crockford's aliases (o/O = 0, i/I/l/L = 1).
 * SF_ERR_ARG naming the input and the bad character, or the input and the allowed range on
 * a negative number or an overflow past INT64_MAX. Base 10 is how every decimal of the
 * project's tools is read. */
int sf_id_parse(const char *text, sf_id_base base, int64_t *id, sf_error *err);

/* Writes Unix ms as ISO-8601 UTC with milliseconds ("2010-11-04T01:42:54.657Z").
 * buf needs SF_ISO8601_MAX bytes. Returns buf. */
#define SF_ISO8601_MAX 32
char *sf_format_iso8601(int64_t unix_ms, char *buf, size_t len);

/* True if the user agent matches the original's grammar [a-zA-Z][a-zA-Z\-0-9]*. */
bool sf_useragent_valid(const char *agent);

#ifdef __cplusplus
}
#endif

#endif /* SNOWFLAKE_H */
