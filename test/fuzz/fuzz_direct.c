/* fuzz_direct.c -- differential fuzz target: the server's path with the direct codec
 * and the path through the generated c_glib processor alone must answer the same frames
 * with the same bytes. Each side has its own handler and worker on its own fake clock,
 * started alike, so that while the two agree they stay in step (same ids, same
 * sequences, same refusals). The first byte sets the handlers' state for the frames
 * that follow it: gate open or closed, lease expired, clock stepped back. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/thrift_application_exception.h>

#include "rpc/bounded_protocol.h"
#include "common/clocks.h"
#include "server/direct_codec.h"
#include "server/frame_transport.h"
#include "server/handler.h"
#include "server/standalone.h"
#include "lib/snowflake.h"
#include "rpc/thrift_fix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_FRAME_SIZE 16777216
#define FUZZ_MAX_BATCH 100
/* A fake clock moves one millisecond every this many reads, so that 4,096 ids in one
 * millisecond and the wait for the next happen without real time passing. */
#define FUZZ_READS_PER_MS 64
#define FUZZ_START_MS 1700000000000LL
#define FUZZ_STEP_BACK_MS 10000
/* Replies that quote the wall clock or the boot clock (get_timestamp, an expired lease)
 * may differ when a clock ticks between the two sides; such a round proves nothing and
 * is run again, up to this many times. A difference within one tick is a failure. */
#define FUZZ_ROUNDS 32

enum {
    FUZZ_GATE_CLOSED = 1,
    FUZZ_LEASE_EXPIRED = 2,
    FUZZ_CLOCK_BACK = 4,
};

typedef struct fuzz_clock {
    int64_t reads;
    int64_t back;
} fuzz_clock;

typedef struct fuzz_side {
    fuzz_clock clock;
    sf_worker *worker;
    sf_standalone *standalone; /* the handler's source: the worker, gate and lease set */
    SfHandler *handler;
    ThriftProcessor *processor;
    SfFrameTransport *transport;
    ThriftProtocol *protocol;
} fuzz_side;

static fuzz_side fuzz_direct, fuzz_library;

static int64_t fuzz_clock_read(void *ctx)
{
    fuzz_clock *c = ctx;
    c->reads++;
    return FUZZ_START_MS + c->reads / FUZZ_READS_PER_MS - c->back;
}

/* Waiting out time is one more read of the fake clock. */
static void fuzz_clock_sleep(void *ctx, int64_t ms)
{
    fuzz_clock *c = ctx;
    c->reads += ms * FUZZ_READS_PER_MS;
}

static void fuzz_side_init(fuzz_side *s)
{
    sf_worker_options o;
    sf_worker_options_init(&o);
    o.worker_id = 3;
    o.datacenter_id = 4;
    o.clock = fuzz_clock_read;
    o.sleep = fuzz_clock_sleep;
    o.clock_ctx = &s->clock;
    s->worker = sf_worker_new(&o, NULL);
    if (s->worker == NULL)
        abort();
    sf_handler_options ho;
    sf_handler_options_init(&ho);
    ho.max_batch_size = FUZZ_MAX_BATCH;
    s->handler = sf_handler_new(&ho);
    s->standalone = sf_standalone_new();
    if (s->standalone == NULL)
        abort();
    sf_handler_set_source(s->handler, sf_standalone_source(s->standalone));
    s->processor = g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR, "handler", s->handler, NULL);
    s->transport = sf_frame_transport_new();
    s->protocol = sf_bounded_protocol_new(THRIFT_TRANSPORT(s->transport));
}

/* Puts a side's handler in the state the control byte asks for. */
static void fuzz_side_set_state(fuzz_side *s, uint8_t control)
{
    s->clock.back = (control & FUZZ_CLOCK_BACK) ? FUZZ_STEP_BACK_MS : 0;
    int64_t lease = (control & FUZZ_LEASE_EXPIRED) ? 1 : 0;
    if (control & FUZZ_GATE_CLOSED)
        sf_handler_close(s->handler, "closed by the fuzz input");
    else
        sf_standalone_publish(s->standalone, s->worker, true, lease, 0, NULL);
}

/* What one side made of the frames. */
typedef struct fuzz_answer {
    ssize_t used;
    size_t frames;
    char *error;
    uint8_t *out;
    size_t out_len;
} fuzz_answer;

static void fuzz_side_answer(fuzz_side *s, bool direct, const uint8_t *data, size_t size,
                             fuzz_answer *a)
{
    GError *error = NULL;
    a->used = sf_frame_transport_answer(s->transport, s->protocol, s->processor,
                                        direct ? sf_direct_answer : NULL,
                                        direct ? s->handler : NULL, data, size,
                                        FUZZ_MAX_FRAME_SIZE, 1024 * 1024, &a->frames, &error);
    a->error = error != NULL ? g_strdup(error->message) : NULL;
    g_clear_error(&error);
    const uint8_t *out = sf_frame_transport_output(s->transport, &a->out_len);
    a->out = g_memdup2(out, a->out_len);
    sf_frame_transport_reset_output(s->transport);
    /* A refusal read by nobody must not carry over to the next round. */
    sf_handler_take_unavailable();
}

static void fuzz_answer_clear(fuzz_answer *a)
{
    g_free(a->error);
    g_free(a->out);
}

static bool fuzz_answers_equal(const fuzz_answer *a, const fuzz_answer *b)
{
    return a->used == b->used && a->frames == b->frames &&
           (a->error == NULL) == (b->error == NULL) &&
           (a->error == NULL || strcmp(a->error, b->error) == 0) && a->out_len == b->out_len &&
           (a->out_len == 0 || memcmp(a->out, b->out, a->out_len) == 0);
}

/* Reports where two answers part, then aborts: a difference is the bug this target
 * looks for. */
static void fuzz_report(const fuzz_answer *a, const fuzz_answer *b)
{
    fprintf(stderr, "direct: used %zd, %zu frames, %zu bytes, error %s\n", a->used, a->frames,
            a->out_len, a->error ? a->error : "none");
    fprintf(stderr, "library: used %zd, %zu frames, %zu bytes, error %s\n", b->used, b->frames,
            b->out_len, b->error ? b->error : "none");
    size_t n = a->out_len < b->out_len ? a->out_len : b->out_len, i = 0;
    while (i < n && a->out[i] == b->out[i])
        i++;
    fprintf(stderr, "replies part at byte %zu\n", i);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_direct.handler == NULL) {
        sf_thrift_fix_finalize();
        sf_thrift_fix_processor();
        g_type_class_ref(THRIFT_TYPE_APPLICATION_EXCEPTION);
        fuzz_side_init(&fuzz_direct);
        fuzz_side_init(&fuzz_library);
    }
    if (size < 1)
        return 0;
    fuzz_side_set_state(&fuzz_direct, data[0]);
    fuzz_side_set_state(&fuzz_library, data[0]);
    for (int round = 0; round < FUZZ_ROUNDS; round++) {
        int64_t wall = sf_clock_now_ms(), boot = sf_clocks_boot_ms();
        fuzz_answer a, b;
        fuzz_side_answer(&fuzz_direct, true, data + 1, size - 1, &a);
        fuzz_side_answer(&fuzz_library, false, data + 1, size - 1, &b);
        bool equal = fuzz_answers_equal(&a, &b);
        bool ticked = wall != sf_clock_now_ms() || boot != sf_clocks_boot_ms();
        if (!equal && !ticked)
            fuzz_report(&a, &b);
        fuzz_answer_clear(&a);
        fuzz_answer_clear(&b);
        if (equal)
            break;
    }
    return 0;
}
