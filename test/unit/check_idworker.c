/* check_idworker.c -- the generator core against the original IdWorkerSpec and
 * our extensions (batches, bounded clock wait, random first sequence, threads). */
#define _POSIX_C_SOURCE 200809L
#include "lib/snowflake.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#define TIMESTAMP_MASK (((1LL << 41) - 1) << SF_TIMESTAMP_SHIFT)
#define WORKER_MASK 0x1F000LL
#define DATACENTER_MASK 0x3E0000LL

/* A scripted clock: returns script[pos++] until the script runs out, then
 * keeps returning `now`. sleep() advances `now`, as real time would. */
typedef struct fake_clock {
    const int64_t *script;
    size_t script_len;
    size_t pos;
    int64_t now;
    int64_t reads;
    int64_t slept_ms;
    int sleeps;
    int64_t step_every; /* when > 0, now += 1 after every step_every reads */
} fake_clock;

static int64_t fake_clock_read(void *ctx)
{
    fake_clock *c = ctx;
    c->reads++;
    if (c->pos < c->script_len)
        return c->script[c->pos++];
    if (c->step_every > 0 && c->reads % c->step_every == 0)
        c->now++;
    return c->now;
}

static void fake_clock_sleep(void *ctx, int64_t ms)
{
    fake_clock *c = ctx;
    c->sleeps++;
    c->slept_ms += ms;
    c->now += ms;
}

static sf_worker *new_worker(int64_t worker_id, int64_t datacenter_id, fake_clock *clock)
{
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.worker_id = worker_id;
    o.datacenter_id = datacenter_id;
    if (clock != NULL) {
        o.clock = fake_clock_read;
        o.sleep = fake_clock_sleep;
        o.clock_ctx = clock;
    }
    sf_worker *w = sf_worker_new(&o, &err);
    ck_assert_msg(w != NULL, "sf_worker_new: %s", err.message);
    return w;
}

static int64_t next_id(sf_worker *w)
{
    int64_t id = -1;
    sf_error err;
    int rc = sf_worker_next_id(w, &id, &err);
    ck_assert_msg(rc == SF_OK, "sf_worker_next_id: %s", err.message);
    return id;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Asserts that ids[0..n) has no duplicate (sorts a copy). */
static void assert_unique(const int64_t *ids, size_t n)
{
    int64_t *copy = malloc(n * sizeof *copy);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, ids, n * sizeof *copy);
    qsort(copy, n, sizeof *copy, cmp_i64);
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(copy[i] != copy[i - 1], "duplicate id %lld", (long long)copy[i]);
    free(copy);
}

static void assert_increasing(const int64_t *ids, size_t n)
{
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(ids[i] > ids[i - 1], "id %zu (%lld) not above id %zu (%lld)", i,
                      (long long)ids[i], i - 1, (long long)ids[i - 1]);
}

/* ---- IdWorkerSpec ---------------------------------------------------------- */

START_TEST(test_generate_an_id)
{
    sf_worker *w = new_worker(1, 1, NULL);
    ck_assert_int_gt(next_id(w), 0);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_return_an_accurate_timestamp)
{
    sf_worker *w = new_worker(1, 1, NULL);
    int64_t before = sf_clock_now_ms();
    int64_t id = next_id(w);
    int64_t after = sf_clock_now_ms();
    int64_t ts = (id >> SF_TIMESTAMP_SHIFT) + SF_TWITTER_EPOCH_MS;
    ck_assert_int_ge(ts, before);
    ck_assert_int_le(ts, after);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_return_the_correct_ids)
{
    sf_worker *w = new_worker(7, 3, NULL);
    ck_assert_int_eq(sf_worker_worker_id(w), 7);
    ck_assert_int_eq(sf_worker_datacenter_id(w), 3);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_properly_mask_worker_id)
{
    sf_worker *w = new_worker(0x1F, 0, NULL);
    for (int i = 0; i < 1000; i++) {
        int64_t id = next_id(w);
        ck_assert_int_eq((id & WORKER_MASK) >> SF_WORKER_ID_SHIFT, 0x1F);
        ck_assert_int_eq((id & DATACENTER_MASK) >> SF_DATACENTER_ID_SHIFT, 0);
    }
    sf_worker_free(w);
}
END_TEST

START_TEST(test_properly_mask_datacenter_id)
{
    sf_worker *w = new_worker(0, 0x1F, NULL);
    int64_t id = next_id(w);
    ck_assert_int_eq((id & DATACENTER_MASK) >> SF_DATACENTER_ID_SHIFT, 0x1F);
    ck_assert_int_eq((id & WORKER_MASK) >> SF_WORKER_ID_SHIFT, 0);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_properly_mask_timestamp)
{
    fake_clock clock = { 0 };
    sf_worker *w = new_worker(31, 31, &clock);
    for (int i = 0; i < 100; i++) {
        int64_t t = sf_clock_now_ms() + i; /* a fixed fake time per round */
        clock.now = t;
        int64_t id = next_id(w);
        ck_assert_int_eq((id & TIMESTAMP_MASK) >> SF_TIMESTAMP_SHIFT, t - SF_TWITTER_EPOCH_MS);
    }
    sf_worker_free(w);
}
END_TEST

START_TEST(test_roll_over_sequence_id)
{
    /* A zero in the low bit of the worker id shows a sequence overflow. */
    const int64_t worker_id = 4, datacenter_id = 4;
    sf_worker *w = new_worker(worker_id, datacenter_id, NULL);
    const int64_t start = 0xFFFFFF - 20, end = 0xFFFFFF + 20;
    sf_worker_set_sequence(w, start);
    for (int64_t i = start; i <= end; i++) {
        int64_t id = next_id(w);
        ck_assert_int_eq((id & WORKER_MASK) >> SF_WORKER_ID_SHIFT, worker_id);
        ck_assert_int_eq((id & DATACENTER_MASK) >> SF_DATACENTER_ID_SHIFT, datacenter_id);
    }
    sf_worker_free(w);
}
END_TEST

START_TEST(test_generate_increasing_ids)
{
    sf_worker *w = new_worker(1, 1, NULL);
    int64_t last = 0;
    for (int i = 0; i < 100; i++) {
        int64_t id = next_id(w);
        ck_assert_int_gt(id, last);
        last = id;
    }
    sf_worker_free(w);
}
END_TEST

START_TEST(test_generate_1_million_ids_quickly)
{
    /* The original's name; it generated and timed 1,000,000. We check that
     * 2,000,000 are distinct, which is the property that matters. */
    const size_t n = 2000000;
    int64_t *ids = malloc(n * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    sf_worker *w = new_worker(23, 0, NULL);
    for (size_t i = 0; i < n; i++)
        ids[i] = next_id(w);
    assert_increasing(ids, n);
    assert_unique(ids, n);
    sf_worker_free(w);
    free(ids);
}
END_TEST

START_TEST(test_generate_ids_over_50_billion)
{
    sf_worker *w = new_worker(0, 0, NULL);
    ck_assert_int_gt(next_id(w), 50000000000LL);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_sleep_if_rollover_twice_in_same_ms)
{
    static const int64_t script[] = { 2 + SF_TWITTER_EPOCH_MS, 2 + SF_TWITTER_EPOCH_MS,
                                      3 + SF_TWITTER_EPOCH_MS };
    fake_clock clock = { .script = script, .script_len = 3, .now = 3 + SF_TWITTER_EPOCH_MS };
    sf_worker *w = new_worker(1, 1, &clock);
    sf_worker_stats st;
    sf_worker_set_sequence(w, 4095);
    next_id(w);
    sf_worker_set_sequence(w, 4095);
    int64_t id = next_id(w);
    sf_worker_get_stats(w, &st);
    ck_assert_int_eq(st.sequence_waits, 1); /* the original's slept == 1 */
    ck_assert_int_eq(clock.reads, 3);
    ck_assert_int_eq(id >> SF_TIMESTAMP_SHIFT, 3);
    ck_assert_int_eq(id & SF_SEQUENCE_MASK, 0);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_unique_ids_when_time_goes_backwards)
{
    fake_clock clock = { .now = 1 + SF_TWITTER_EPOCH_MS };
    sf_worker *w = new_worker(0, 0, &clock);
    int64_t id1 = next_id(w);
    ck_assert_int_eq(id1 >> SF_TIMESTAMP_SHIFT, 1);
    ck_assert_int_eq(id1 & SF_SEQUENCE_MASK, 0);
    int64_t id2 = next_id(w);
    ck_assert_int_eq(id2 >> SF_TIMESTAMP_SHIFT, 1);
    ck_assert_int_eq(id2 & SF_SEQUENCE_MASK, 1);

    clock.now = 0 + SF_TWITTER_EPOCH_MS; /* the clock steps back 1 ms */
    int64_t id = 0;
    sf_error err;
    ck_assert_int_eq(sf_worker_next_id(w, &id, &err), SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_eq(err.code, SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_eq(err.behind_ms, 1);
    ck_assert_str_eq(err.message, "Clock moved backwards.  Refusing to generate id for 1 milliseconds");
    ck_assert_int_eq(id, 0); /* nothing written on error */

    clock.now = 1 + SF_TWITTER_EPOCH_MS; /* time catches up: the sequence was kept */
    int64_t id3 = next_id(w);
    ck_assert_int_eq(id3 >> SF_TIMESTAMP_SHIFT, 1);
    ck_assert_int_eq(id3 & SF_SEQUENCE_MASK, 2);

    sf_worker_stats st;
    sf_worker_get_stats(w, &st);
    ck_assert_int_eq(st.clock_backward_errors, 1);
    ck_assert_int_eq(st.ids_generated, 3);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_backwards_names_how_far)
{
    fake_clock clock = { .now = 5000 + SF_TWITTER_EPOCH_MS };
    sf_worker *w = new_worker(0, 0, &clock);
    next_id(w);
    clock.now -= 1234;
    sf_error err;
    int64_t id;
    ck_assert_int_eq(sf_worker_next_id(w, &id, &err), SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_eq(err.behind_ms, 1234);
    ck_assert_str_eq(err.message,
                     "Clock moved backwards.  Refusing to generate id for 1234 milliseconds");
    sf_worker_free(w);
}
END_TEST

static const char *const valid_agents[] = { "infra-dm", "a", "A", "abc123", "a-b-c", "Z9-" };
static const char *const invalid_agents[] = { "", "1", "1asdf", "a b", "ab_c", "-a", "a.b",
                                              "a\nb", "é" };

START_TEST(test_valid_useragent)
{
    ck_assert_msg(sf_useragent_valid(valid_agents[_i]), "'%s' should be valid", valid_agents[_i]);
}
END_TEST

START_TEST(test_invalid_useragent)
{
    ck_assert_msg(!sf_useragent_valid(invalid_agents[_i]), "'%s' should be invalid",
                  invalid_agents[_i]);
}
END_TEST

START_TEST(test_null_useragent)
{
    ck_assert(!sf_useragent_valid(NULL));
}
END_TEST

/* ---- argument errors ------------------------------------------------------- */

static const struct {
    int64_t worker, datacenter;
    const char *expect;
} bad_ids[] = {
    { 32, 0, "worker id 32 is out of range: allowed 0..31" },
    { -1, 0, "worker id -1 is out of range: allowed 0..31" },
    { 0, 32, "datacenter id 32 is out of range: allowed 0..31" },
    { 0, -5, "datacenter id -5 is out of range: allowed 0..31" },
};

START_TEST(test_bad_ids_refused)
{
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.worker_id = bad_ids[_i].worker;
    o.datacenter_id = bad_ids[_i].datacenter;
    ck_assert_ptr_null(sf_worker_new(&o, &err));
    ck_assert_int_eq(err.code, SF_ERR_ARG);
    ck_assert_str_eq(err.message, bad_ids[_i].expect);
}
END_TEST

START_TEST(test_bad_options_refused)
{
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.max_clock_backward_wait_ms = -1;
    ck_assert_int_eq(sf_worker_options_check(&o, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "allowed 0..60000"));
    sf_worker_options_init(&o);
    o.epoch_ms = -1;
    ck_assert_int_eq(sf_worker_options_check(&o, &err), SF_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "epoch"));
}
END_TEST

START_TEST(test_clock_before_epoch_refused)
{
    fake_clock clock = { .now = SF_TWITTER_EPOCH_MS - 1 };
    sf_worker *w = new_worker(0, 0, &clock);
    int64_t id;
    sf_error err;
    ck_assert_int_eq(sf_worker_next_id(w, &id, &err), SF_ERR_CLOCK);
    ck_assert_ptr_nonnull(strstr(err.message, "41-bit"));
    sf_worker_free(w);
}
END_TEST

/* ---- batches --------------------------------------------------------------- */

static const size_t batch_sizes[] = { 1, 4095, 4096, 4097, 100000 };

START_TEST(test_batch_sizes)
{
    size_t n = batch_sizes[_i];
    int64_t *ids = malloc((n + 2) * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    sf_worker *w = new_worker(5, 6, NULL);
    sf_error err;
    ids[0] = next_id(w); /* a single id before and after: one sequence */
    ck_assert_int_eq(sf_worker_next_ids(w, ids + 1, n, &err), SF_OK);
    ids[n + 1] = next_id(w);
    assert_increasing(ids, n + 2);
    assert_unique(ids, n + 2);
    for (size_t i = 0; i < n + 2; i++) {
        ck_assert_int_eq((ids[i] & WORKER_MASK) >> SF_WORKER_ID_SHIFT, 5);
        ck_assert_int_eq((ids[i] & DATACENTER_MASK) >> SF_DATACENTER_ID_SHIFT, 6);
    }
    sf_worker_stats st;
    sf_worker_get_stats(w, &st);
    ck_assert_int_eq(st.ids_generated, n + 2);
    sf_worker_free(w);
    free(ids);
}
END_TEST

START_TEST(test_batch_takes_runs_per_millisecond)
{
    /* A frozen clock that moves 1 ms whenever it has been read 3 times: a
     * batch of 10000 needs 3 ms, and must read the clock a handful of times,
     * not once per id. */
    fake_clock clock = { .now = 100 + SF_TWITTER_EPOCH_MS, .step_every = 3 };
    sf_worker *w = new_worker(1, 2, &clock);
    int64_t *ids = malloc(10000 * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    sf_error err;
    ck_assert_int_eq(sf_worker_next_ids(w, ids, 10000, &err), SF_OK);
    assert_increasing(ids, 10000);
    ck_assert_int_eq(ids[0] & SF_SEQUENCE_MASK, 0);
    ck_assert_int_eq(ids[4095] & SF_SEQUENCE_MASK, 4095);
    ck_assert_int_eq(ids[4096] & SF_SEQUENCE_MASK, 0);
    ck_assert_int_gt(ids[4096] >> SF_TIMESTAMP_SHIFT, ids[4095] >> SF_TIMESTAMP_SHIFT);
    ck_assert_int_lt(clock.reads, 30);
    free(ids);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_batch_refused_when_clock_backwards)
{
    fake_clock clock = { .now = 100 + SF_TWITTER_EPOCH_MS };
    sf_worker *w = new_worker(1, 2, &clock);
    int64_t ids[4] = { 0 };
    sf_error err;
    next_id(w);
    clock.now -= 7;
    ck_assert_int_eq(sf_worker_next_ids(w, ids, 4, &err), SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_eq(err.behind_ms, 7);
    sf_worker_stats st;
    sf_worker_get_stats(w, &st);
    ck_assert_int_eq(st.ids_generated, 1);
    sf_worker_free(w);
}
END_TEST

/* ---- options --------------------------------------------------------------- */

START_TEST(test_backward_wait_small_step)
{
    fake_clock clock = { .now = 1000 + SF_TWITTER_EPOCH_MS };
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.max_clock_backward_wait_ms = 5;
    o.clock = fake_clock_read;
    o.sleep = fake_clock_sleep;
    o.clock_ctx = &clock;
    sf_worker *w = sf_worker_new(&o, &err);
    ck_assert_ptr_nonnull(w);
    int64_t a = next_id(w);
    clock.now -= 5; /* within the allowance: waited out */
    int64_t b = next_id(w);
    ck_assert_int_gt(b, a);
    ck_assert_int_eq(clock.slept_ms, 5);
    clock.now -= 6; /* beyond it: refused, without sleeping */
    int64_t c;
    ck_assert_int_eq(sf_worker_next_id(w, &c, &err), SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_eq(err.behind_ms, 6);
    ck_assert_int_eq(clock.slept_ms, 5);
    sf_worker_stats st;
    sf_worker_get_stats(w, &st);
    ck_assert_int_eq(st.clock_backward_waits, 1);
    ck_assert_int_eq(st.clock_backward_errors, 1);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_exhausted_millisecond_refuses_a_backward_step)
{
    /* Millisecond 1000's sequence runs out just as the clock steps back 1 s. Waiting
     * for millisecond 1001 would spin through the whole step with the lock held; it is
     * a backward step like any other, refused at once. */
    const int64_t t = 1000 + SF_TWITTER_EPOCH_MS;
    const int64_t script[] = { t, t };
    fake_clock clock = { .script = script, .script_len = 2, .now = t - 1000, .step_every = 1 };
    sf_worker *w = new_worker(0, 0, &clock);
    next_id(w);
    sf_worker_set_sequence(w, SF_SEQUENCE_MASK);
    int64_t id;
    sf_error err;
    int64_t reads = clock.reads;
    ck_assert_int_eq(sf_worker_next_id(w, &id, &err), SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_lt(clock.reads - reads, 10);
    ck_assert_int_ge(err.behind_ms, 990);
    sf_worker_free(w);
}
END_TEST

/* A clock whose sleep checks, from another thread, that the worker can be read
 * while a backward step is being waited out. The sleep waits up to PROBE_PATIENCE_S for
 * the probe: a thread may start late on a busy machine, and the wait ends when it is done;
 * a wait that held the worker's lock would keep the probe out for all of it. */
#define PROBE_PATIENCE_S 60
typedef struct probing_clock {
    fake_clock clock; /* first: the fake clock functions take it as their ctx */
    sf_worker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool probe_done;
    bool probe_done_during_sleep;
    bool probe_started;
    pthread_t probe;
} probing_clock;

static void *probe_worker(void *arg)
{
    probing_clock *c = arg;
    sf_worker_stats st;
    (void)sf_worker_last_timestamp(c->w);
    sf_worker_get_stats(c->w, &st);
    pthread_mutex_lock(&c->mu);
    c->probe_done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void probing_sleep(void *ctx, int64_t ms)
{
    probing_clock *c = ctx;
    ck_assert_int_eq(pthread_create(&c->probe, NULL, probe_worker, c), 0);
    c->probe_started = true;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += PROBE_PATIENCE_S;
    pthread_mutex_lock(&c->mu);
    while (!c->probe_done && pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0) {
    }
    c->probe_done_during_sleep = c->probe_done;
    pthread_mutex_unlock(&c->mu);
    fake_clock_sleep(&c->clock, ms);
}

START_TEST(test_backward_wait_leaves_the_worker_readable)
{
    /* Waiting out a backward step may take up to a minute: the registry's thread and
     * the admin endpoint read the worker meanwhile, so the wait must not hold its lock. */
    probing_clock c = { .clock = { .now = 1000 + SF_TWITTER_EPOCH_MS } };
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.max_clock_backward_wait_ms = 1000;
    o.clock = fake_clock_read;
    o.sleep = probing_sleep;
    o.clock_ctx = &c;
    c.w = sf_worker_new(&o, &err);
    ck_assert_ptr_nonnull(c.w);
    int64_t a = next_id(c.w);
    c.clock.now -= 500;
    int64_t b = next_id(c.w);
    ck_assert_int_gt(b, a);
    ck_assert(c.probe_started);
    pthread_join(c.probe, NULL);
    ck_assert_msg(c.probe_done_during_sleep,
                  "the worker could not be read while a backward step was waited out");
    sf_worker_free(c.w);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
}
END_TEST

START_TEST(test_backward_wait_off_by_default)
{
    fake_clock clock = { .now = 1000 + SF_TWITTER_EPOCH_MS };
    sf_worker *w = new_worker(0, 0, &clock);
    next_id(w);
    clock.now -= 1;
    int64_t id;
    ck_assert_int_eq(sf_worker_next_id(w, &id, NULL), SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_eq(clock.sleeps, 0);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_random_first_sequence)
{
    /* One id per millisecond: the original always gives sequence 0. */
    fake_clock clock = { .now = 10 + SF_TWITTER_EPOCH_MS, .step_every = 1 };
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.random_first_sequence = true;
    o.clock = fake_clock_read;
    o.clock_ctx = &clock;
    sf_worker *w = sf_worker_new(&o, &err);
    ck_assert_ptr_nonnull(w);
    int buckets[4] = { 0 }, nonzero = 0;
    int64_t last = 0;
    for (int i = 0; i < 4000; i++) {
        int64_t id = next_id(w);
        int64_t seq = id & SF_SEQUENCE_MASK;
        ck_assert_int_gt(id, last);
        ck_assert_int_le(seq, 2047);
        nonzero += seq != 0;
        buckets[id % 4]++;
        last = id;
    }
    ck_assert_int_gt(nonzero, 3900);
    for (int b = 0; b < 4; b++) /* id % 4 is spread, not all in bucket 0 */
        ck_assert_int_gt(buckets[b], 800);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_random_first_sequence_still_unique_at_full_rate)
{
    sf_worker_options o;
    sf_error err;
    sf_worker_options_init(&o);
    o.random_first_sequence = true;
    sf_worker *w = sf_worker_new(&o, &err);
    ck_assert_ptr_nonnull(w);
    const size_t n = 200000;
    int64_t *ids = malloc(n * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(sf_worker_next_ids(w, ids, n / 2, &err), SF_OK);
    for (size_t i = n / 2; i < n; i++)
        ids[i] = next_id(w);
    assert_increasing(ids, n);
    free(ids);
    sf_worker_free(w);
}
END_TEST

START_TEST(test_advance_last_timestamp)
{
    fake_clock clock = { .now = 1000 + SF_TWITTER_EPOCH_MS };
    sf_worker *w = new_worker(0, 0, &clock);
    sf_worker_advance_last_timestamp(w, clock.now + 50);
    int64_t id;
    sf_error err;
    ck_assert_int_eq(sf_worker_next_id(w, &id, &err), SF_ERR_CLOCK_BACKWARDS);
    ck_assert_int_eq(err.behind_ms, 50);
    clock.now += 50; /* the recorded millisecond itself is used up */
    clock.step_every = 2;
    id = next_id(w);
    ck_assert_int_eq(id >> SF_TIMESTAMP_SHIFT, 1051);
    sf_worker_advance_last_timestamp(w, 0); /* never moves backwards */
    ck_assert_int_eq(sf_worker_last_timestamp(w), 1051 + SF_TWITTER_EPOCH_MS);
    sf_worker_free(w);
}
END_TEST

/* ---- threads --------------------------------------------------------------- */

#define THREADS 4
#define PER_THREAD 250000

typedef struct thread_job {
    sf_worker *w;
    int64_t *ids;
    int failures;
} thread_job;

static void *thread_generate(void *arg)
{
    thread_job *job = arg;
    for (size_t i = 0; i < PER_THREAD; i++) {
        /* Mix singles and batches: both take the same lock. */
        if (i % 1000 == 0 && i + 100 <= PER_THREAD) {
            if (sf_worker_next_ids(job->w, job->ids + i, 100, NULL) != SF_OK)
                job->failures++;
            i += 99;
        } else if (sf_worker_next_id(job->w, job->ids + i, NULL) != SF_OK) {
            job->failures++;
        }
    }
    return NULL;
}

START_TEST(test_threads_no_duplicates)
{
    sf_worker *w = new_worker(9, 9, NULL);
    int64_t *all = malloc((size_t)THREADS * PER_THREAD * sizeof *all);
    ck_assert_ptr_nonnull(all);
    pthread_t tids[THREADS];
    thread_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (thread_job){ .w = w, .ids = all + (size_t)t * PER_THREAD };
        ck_assert_int_eq(pthread_create(&tids[t], NULL, thread_generate, &jobs[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        ck_assert_int_eq(pthread_join(tids[t], NULL), 0);
        ck_assert_int_eq(jobs[t].failures, 0);
        assert_increasing(jobs[t].ids, PER_THREAD); /* each caller sees increasing ids */
    }
    assert_unique(all, (size_t)THREADS * PER_THREAD);
    sf_worker_stats st;
    sf_worker_get_stats(w, &st);
    ck_assert_int_eq(st.ids_generated, (uint64_t)THREADS * PER_THREAD);
    free(all);
    sf_worker_free(w);
}
END_TEST

static Suite *idworker_suite(void)
{
    Suite *s = suite_create("idworker");
    TCase *spec = tcase_create("IdWorkerSpec");
    tcase_set_timeout(spec, 60);
    tcase_add_test(spec, test_generate_an_id);
    tcase_add_test(spec, test_return_an_accurate_timestamp);
    tcase_add_test(spec, test_return_the_correct_ids);
    tcase_add_test(spec, test_properly_mask_worker_id);
    tcase_add_test(spec, test_properly_mask_datacenter_id);
    tcase_add_test(spec, test_properly_mask_timestamp);
    tcase_add_test(spec, test_roll_over_sequence_id);
    tcase_add_test(spec, test_generate_increasing_ids);
    tcase_add_test(spec, test_generate_1_million_ids_quickly);
    tcase_add_test(spec, test_generate_ids_over_50_billion);
    tcase_add_test(spec, test_sleep_if_rollover_twice_in_same_ms);
    tcase_add_test(spec, test_unique_ids_when_time_goes_backwards);
    tcase_add_test(spec, test_backwards_names_how_far);
    tcase_add_loop_test(spec, test_valid_useragent, 0,
                        (int)(sizeof valid_agents / sizeof valid_agents[0]));
    tcase_add_loop_test(spec, test_invalid_useragent, 0,
                        (int)(sizeof invalid_agents / sizeof invalid_agents[0]));
    tcase_add_test(spec, test_null_useragent);
    suite_add_tcase(s, spec);

    TCase *args = tcase_create("arguments");
    tcase_add_loop_test(args, test_bad_ids_refused, 0, (int)(sizeof bad_ids / sizeof bad_ids[0]));
    tcase_add_test(args, test_bad_options_refused);
    tcase_add_test(args, test_clock_before_epoch_refused);
    suite_add_tcase(s, args);

    TCase *batch = tcase_create("batch");
    tcase_set_timeout(batch, 60);
    tcase_add_loop_test(batch, test_batch_sizes, 0,
                        (int)(sizeof batch_sizes / sizeof batch_sizes[0]));
    tcase_add_test(batch, test_batch_takes_runs_per_millisecond);
    tcase_add_test(batch, test_batch_refused_when_clock_backwards);
    suite_add_tcase(s, batch);

    TCase *opts = tcase_create("options");
    tcase_set_timeout(opts, 2 * PROBE_PATIENCE_S); /* a probe kept out reports, not times out */
    tcase_add_test(opts, test_backward_wait_small_step);
    tcase_add_test(opts, test_backward_wait_off_by_default);
    tcase_add_test(opts, test_exhausted_millisecond_refuses_a_backward_step);
    tcase_add_test(opts, test_backward_wait_leaves_the_worker_readable);
    tcase_add_test(opts, test_random_first_sequence);
    tcase_add_test(opts, test_random_first_sequence_still_unique_at_full_rate);
    tcase_add_test(opts, test_advance_last_timestamp);
    suite_add_tcase(s, opts);

    TCase *threads = tcase_create("threads");
    tcase_set_timeout(threads, 120);
    tcase_add_test(threads, test_threads_no_duplicates);
    suite_add_tcase(s, threads);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(idworker_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
