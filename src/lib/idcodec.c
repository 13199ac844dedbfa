/* idcodec.c -- splitting ids into their fields and back, the ids of a time range, and
 * printing their time.
 *
 * The inverse of the generator's bit layout, for the command-line decoder,
 * the tests and any embedder that needs to know where an id came from. */
#define _POSIX_C_SOURCE 200809L
#include "snowflake.h"
#include "sf_error.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

static int sf_check_epoch(int64_t epoch_ms, sf_error *err);

int sf_decode(int64_t id, int64_t epoch_ms, sf_decoded *out, sf_error *err)
{
    if (id < 0)
        return sf_error_fail(err, SF_ERR_ARG, "id %" PRId64 " is negative: allowed 0..%" PRId64,
                             id, INT64_MAX);
    if (sf_check_epoch(epoch_ms, err) != SF_OK)
        return SF_ERR_ARG;
    out->id = id;
    out->timestamp_ms = (id >> SF_TIMESTAMP_SHIFT) + epoch_ms;
    out->datacenter_id = (id >> SF_DATACENTER_ID_SHIFT) & SF_MAX_DATACENTER_ID;
    out->worker_id = (id >> SF_WORKER_ID_SHIFT) & SF_MAX_WORKER_ID;
    out->sequence = id & SF_SEQUENCE_MASK;
    return SF_OK;
}

/* Refuses an epoch outside 0..SF_MAX_EPOCH_MS, naming it. */
static int sf_check_epoch(int64_t epoch_ms, sf_error *err)
{
    if (epoch_ms < 0 || epoch_ms > SF_MAX_EPOCH_MS)
        return sf_error_fail(err, SF_ERR_ARG, "epoch %" PRId64 " ms is outside 0..%lld",
                             epoch_ms, SF_MAX_EPOCH_MS);
    return SF_OK;
}

/* Refuses a time (Unix ms) that no id made with epoch_ms can carry, naming what and it. */
static int sf_check_time(const char *what, int64_t unix_ms, int64_t epoch_ms, sf_error *err)
{
    if (unix_ms < epoch_ms || unix_ms - epoch_ms > SF_MAX_TIMESTAMP_DELTA)
        return sf_error_fail(err, SF_ERR_ARG, "%s %" PRId64 " ms is outside the ids' time "
                             "range %" PRId64 "..%" PRId64 " (epoch .. epoch + 2^41 - 1 ms)",
                             what, unix_ms, epoch_ms, epoch_ms + (int64_t)SF_MAX_TIMESTAMP_DELTA);
    return SF_OK;
}

/* Refuses a field outside 0..max, naming it and its value. */
static int sf_check_field(const char *what, int64_t value, int64_t max, sf_error *err)
{
    if (value < 0 || value > max)
        return sf_error_fail(err, SF_ERR_ARG, "%s %" PRId64 " is out of range: allowed 0..%"
                             PRId64, what, value, max);
    return SF_OK;
}

int sf_compose(const sf_decoded *f, int64_t epoch_ms, int64_t *id, sf_error *err)
{
    int rc = sf_check_epoch(epoch_ms, err);
    if (rc == SF_OK)
        rc = sf_check_field("datacenter id", f->datacenter_id, SF_MAX_DATACENTER_ID, err);
    if (rc == SF_OK)
        rc = sf_check_field("worker id", f->worker_id, SF_MAX_WORKER_ID, err);
    if (rc == SF_OK)
        rc = sf_check_field("sequence", f->sequence, SF_SEQUENCE_MASK, err);
    if (rc == SF_OK)
        rc = sf_check_time("timestamp", f->timestamp_ms, epoch_ms, err);
    if (rc != SF_OK)
        return rc;
    *id = ((f->timestamp_ms - epoch_ms) << SF_TIMESTAMP_SHIFT) |
          (f->datacenter_id << SF_DATACENTER_ID_SHIFT) | (f->worker_id << SF_WORKER_ID_SHIFT) |
          f->sequence;
    return SF_OK;
}

int sf_id_range(int64_t from_ms, int64_t to_ms, int64_t epoch_ms, int64_t *lo, int64_t *hi,
                sf_error *err)
{
    int rc = sf_check_epoch(epoch_ms, err);
    if (rc == SF_OK)
        rc = sf_check_time("from", from_ms, epoch_ms, err);
    if (rc == SF_OK)
        rc = sf_check_time("to", to_ms, epoch_ms, err);
    if (rc != SF_OK)
        return rc;
    if (from_ms > to_ms)
        return sf_error_fail(err, SF_ERR_ARG, "from %" PRId64 " ms is after to %" PRId64
                             " ms: allowed from <= to", from_ms, to_ms);
    *lo = (from_ms - epoch_ms) << SF_TIMESTAMP_SHIFT;
    *hi = ((to_ms - epoch_ms) << SF_TIMESTAMP_SHIFT) | ((INT64_C(1) << SF_TIMESTAMP_SHIFT) - 1);
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
