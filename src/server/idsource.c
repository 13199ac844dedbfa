/* idsource.c -- a libsnowflake-zk registration as the handler's source of ids: each call is
 * the handle's own (snowflake_zk.h), its errors put in the handler's terms. */
#include "idsource.h"

#include <stdio.h>
#include <string.h>

/* A registration's reasons fit the handler's buffer whole. */
_Static_assert(SF_ID_SOURCE_REASON_MAX >= SFZ_ERROR_MAX, "SF_ID_SOURCE_REASON_MAX below SFZ_ERROR_MAX");

static sf_ids_outcome sf_registration_next_ids(void *ctx, int64_t *ids, size_t count, char *why,
                                               size_t len, size_t *discarded)
{
    sfz_error err;
    int rc = sfz_next_ids(ctx, ids, count, &err);
    if (rc == SFZ_OK)
        return SF_IDS_OK;
    snprintf(why, len, "%s", err.message);
    *discarded = rc == SFZ_ERR_FENCED ? err.discarded : 0;
    return rc == SFZ_ERR_FENCED ? SF_IDS_REFUSED : SF_IDS_CLOCK;
}

static void sf_registration_ids(void *ctx, int64_t *datacenter_id, int64_t *worker_id)
{
    *datacenter_id = sfz_datacenter_id(ctx);
    *worker_id = sfz_worker_id(ctx);
}

static bool sf_registration_refusal(void *ctx, char *why, size_t len)
{
    sfz_state st;
    sfz_get_state(ctx, &st);
    snprintf(why, len, "%s", st.serving ? "" : st.reason);
    return !st.serving;
}

static bool sf_registration_health(void *ctx, sfz_health *out)
{
    sfz_get_health(ctx, out);
    return true;
}

static int64_t sf_registration_stats(void *ctx, sf_worker_stats *out, char *path, size_t len)
{
    sfz_get_stats(ctx, out);
    return sfz_worker_ids_taken(ctx, path, len);
}

/* For good: the registration must not open the gate again. */
static void sf_registration_close(void *ctx, const char *reason)
{
    sfz_shut(ctx, reason);
}

sf_id_source sf_id_source_for_registration(sfz *zk)
{
    static const sf_id_source_ops ops = {
        .next_ids = sf_registration_next_ids,
        .ids = sf_registration_ids,
        .refusal = sf_registration_refusal,
        .health = sf_registration_health,
        .stats = sf_registration_stats,
        .close = sf_registration_close,
    };
    return (sf_id_source){.ops = &ops, .ctx = zk};
}
