/* idcodec.c -- splitting ids into their fields and back, and printing their time.
 *
 * The inverse of the generator's bit layout, for the command-line decoder,
 * the tests and any embedder that needs to know where an id came from. */
#define _POSIX_C_SOURCE 200809L
#include "snowflake.h"
#include "sf_error.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

int sf_decode(int64_t id, int64_t epoch_ms, sf_decoded *out, sf_error *err)
{
    if (id < 0)
        return sf_error_fail(err, SF_ERR_ARG, "id %" PRId64 " is negative: allowed 0..%" PRId64,
                             id, INT64_MAX);
    if (epoch_ms < 0 || epoch_ms > SF_MAX_EPOCH_MS)
        return sf_error_fail(err, SF_ERR_ARG, "epoch %" PRId64 " ms is outside 0..%lld",
                             epoch_ms, SF_MAX_EPOCH_MS);
    out->id = id;
    out->timestamp_ms = (id >> SF_TIMESTAMP_SHIFT) + epoch_ms;
    out->datacenter_id = (id >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID;
    out->worker_id = (id >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID;
    out->sequence = id & SF_SEQUENCE_MASK;
    return SF_OK;
}

/* Names the first field outside its range, or returns NULL. */
static const char *sf_compose_bad_field(const sf_decoded *f, int64_t epoch_ms, int64_t *max)
{
    *max = SF_MAX_DATACENTER_ID;
    if (f->datacenter_id < 0 || f->datacenter_id > SF_MAX_DATACENTER_ID)
        return "datacenter id";
    *max = SF_MAX_WORKER_ID;
    if (f->worker_id < 0 || f->worker_id > SF_MAX_WORKER_ID)
        return "worker id";
    *max = SF_SEQUENCE_MASK;
    if (f->sequence < 0 || f->sequence > SF_SEQUENCE_MASK)
        return "sequence";
    *max = SF_MAX_TIMESTAMP_DELTA;
    if (f->timestamp_ms < epoch_ms || f->timestamp_ms - epoch_ms > SF_MAX_TIMESTAMP_DELTA)
        return "timestamp - epoch";
    return NULL;
}

int sf_compose(const sf_decoded *f, int64_t epoch_ms, int64_t *id, sf_error *err)
{
    int64_t max;
    const char *bad = sf_compose_bad_field(f, epoch_ms, &max);
    if (bad != NULL)
        return sf_error_fail(err, SF_ERR_ARG, "%s is out of range: allowed 0..%" PRId64, bad,
                             max);
    *id = ((f->timestamp_ms - epoch_ms) << SF_TIMESTAMP_SHIFT) |
          (f->datacenter_id << SF_DATACENTER_ID_SHIFT) | (f->worker_id << SF_WORKER_ID_SHIFT) |
          f->sequence;
    return SF_OK;
}

char *sf_format_iso8601(int64_t unix_ms, char *buf, size_t len)
{
    time_t secs = (time_t)(unix_ms / 1000);
    int64_t ms = unix_ms % 1000;
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    struct tm tm;
    if (gmtime_r(&secs, &tm) == NULL) {
        snprintf(buf, len, "(time out of range)");
        return buf;
    }
    char day[24];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", day, (int)ms);
    return buf;
}
