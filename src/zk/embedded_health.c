/* embedded_health.c -- libsnowflake-zk's health figures: the registry's cause and session
 * mapped to the public sets (sfz_reason, sfz_session) and their names. */
#include "embedded_health.h"

#include <string.h>

const char *sfz_reason_name(int reason)
{
    static const char *const names[SFZ_REASONS] = {
        [SFZ_REASON_NONE] = "none",
        [SFZ_REASON_STARTING] = "starting",
        [SFZ_REASON_ZOOKEEPER_UNREACHABLE] = "zookeeper_unreachable",
        [SFZ_REASON_SESSION_EXPIRED] = "session_expired",
        [SFZ_REASON_LEASE_UNCONFIRMED] = "lease_unconfirmed",
        [SFZ_REASON_WORKER_NODE_LOST] = "worker_node_lost",
        [SFZ_REASON_CLAIM_FAILED] = "claim_failed",
        [SFZ_REASON_WAITING_FOR_FLOOR] = "waiting_for_floor",
        [SFZ_REASON_CLOCK_SKEW] = "clock_skew",
        [SFZ_REASON_STOPPING] = "stopping",
    };
    return reason >= 0 && reason < SFZ_REASONS ? names[reason] : "unknown";
}

const char *sfz_session_name(int session)
{
    static const char *const names[SFZ_SESSIONS] = {
        [SFZ_SESSION_CONNECTING] = "connecting",
        [SFZ_SESSION_CONNECTED] = "connected",
        [SFZ_SESSION_DISCONNECTED] = "disconnected",
        [SFZ_SESSION_EXPIRED] = "expired",
    };
    return session >= 0 && session < SFZ_SESSIONS ? names[session] : "unknown";
}

/* The public reason for the registry's cause. */
static int sfz_health_reason(sf_registry_cause cause)
{
    switch (cause) {
    case SF_REGISTRY_CAUSE_NONE:
        return SFZ_REASON_NONE;
    case SF_REGISTRY_CAUSE_UNREACHABLE:
        return SFZ_REASON_ZOOKEEPER_UNREACHABLE;
    case SF_REGISTRY_CAUSE_EXPIRED:
        return SFZ_REASON_SESSION_EXPIRED;
    case SF_REGISTRY_CAUSE_LEASE:
        return SFZ_REASON_LEASE_UNCONFIRMED;
    case SF_REGISTRY_CAUSE_NODE_LOST:
        return SFZ_REASON_WORKER_NODE_LOST;
    case SF_REGISTRY_CAUSE_CLAIM:
        return SFZ_REASON_CLAIM_FAILED;
    case SF_REGISTRY_CAUSE_FLOOR:
        return SFZ_REASON_WAITING_FOR_FLOOR;
    case SF_REGISTRY_CAUSE_STOPPING:
        return SFZ_REASON_STOPPING;
    case SF_REGISTRY_CAUSE_STARTING:
        break;
    }
    return SFZ_REASON_STARTING;
}

void sfz_health_fill(sfz_health *out, bool serving, bool shut, sf_registry *registry,
                     sf_fence *fence, int64_t since_ms)
{
    memset(out, 0, sizeof *out);
    out->since_ms = since_ms;
    out->reason = SFZ_REASON_STARTING;
    if (registry == NULL) /* before sfz_run made one: no session yet */
        out->session = SFZ_SESSION_CONNECTING;
    else {
        sf_registry_health rh;
        sf_registry_get_health(registry, &rh);
        out->session = (int)rh.session; /* the same order: see the assertions below */
        out->reconnects = rh.reconnects;
        out->sessions_expired = rh.expirations;
        out->reason = sfz_health_reason(rh.cause);
        /* The registry serves, the fence does not: the live clock check holds it shut, or
         * the lease (or the timestamps it reserved) no longer covers now. */
        char why[SF_FENCE_REASON_MAX];
        if (out->reason == SFZ_REASON_NONE && !serving)
            out->reason = sf_fence_held(fence, why, sizeof why) ? SFZ_REASON_CLOCK_SKEW
                                                                : SFZ_REASON_LEASE_UNCONFIRMED;
    }
    if (shut)
        out->reason = SFZ_REASON_STOPPING;
    else if (serving)
        out->reason = SFZ_REASON_NONE;
}

_Static_assert((int)SF_REGISTRY_SESSION_CONNECTING == SFZ_SESSION_CONNECTING &&
               (int)SF_REGISTRY_SESSION_CONNECTED == SFZ_SESSION_CONNECTED &&
               (int)SF_REGISTRY_SESSION_DISCONNECTED == SFZ_SESSION_DISCONNECTED &&
               (int)SF_REGISTRY_SESSION_EXPIRED == SFZ_SESSION_EXPIRED,
               "the registry's session states are the public ones, in order");
