/* admin_state.c -- the admin endpoint's /state.json: what a person looking at one node in
 * trouble (the status page) or at a fleet (snowflake-zk serve) needs first, in one read. */
#include "admin_internal.h"

/* Appends "key":"value" (or null) after a comma. */
static void sf_admin_state_string(GString *out, const char *key, const char *value)
{
    g_string_append_printf(out, ",\"%s\":", key);
    if (value != NULL)
        sf_json_text(out, value);
    else
        g_string_append(out, "null");
}

char *sf_admin_render_state(const sf_admin_snapshot *snap, const char *node, int64_t now_ms)
{
    const sf_admin_state *st = &snap->state;
    GString *out = g_string_new("{\"node\":");
    sf_json_text(out, node != NULL ? node : "");
    g_string_append_printf(out, ",\"serving\":%s", snap->serving ? "true" : "false");
    sf_admin_state_string(out, "reason", snap->serving ? NULL : snap->reason);
    sf_admin_state_string(out, "reason_code", snap->has_state ? st->reason_code : NULL);
    if (snap->has_state && st->since_ms > 0)
        g_string_append_printf(out, ",\"since_ms\":%" G_GINT64_FORMAT, st->since_ms);
    else
        g_string_append(out, ",\"since_ms\":null");
    g_string_append_printf(out, ",\"now_ms\":%" G_GINT64_FORMAT, now_ms);
    sf_admin_state_string(out, "zookeeper_session", snap->has_state ? st->session : NULL);
    g_string_append(out, ",\"worker_ids\":");
    if (snap->has_state && st->worker_id_path != NULL && st->worker_ids_taken >= 0) {
        g_string_append(out, "{\"path\":");
        sf_json_text(out, st->worker_id_path);
        g_string_append_printf(out, ",\"taken\":%" G_GINT64_FORMAT ",\"free\":%" G_GINT64_FORMAT
                               ",\"current\":%s}", st->worker_ids_taken,
                               st->worker_ids_total - st->worker_ids_taken,
                               st->worker_ids_current ? "true" : "false");
    } else {
        g_string_append(out, "null");
    }
    if (snap->has_state && st->skew_known)
        g_string_append_printf(out, ",\"clock_skew_ms\":%" G_GINT64_FORMAT, st->skew_ms);
    else
        g_string_append(out, ",\"clock_skew_ms\":null");
    /* While the start tries again (ZooKeeper down, every id taken, ...): how often so far,
     * and when next. */
    if (snap->has_state && st->start_tries > 0) {
        g_string_append_printf(out, ",\"start\":{\"tries\":%d,\"next_try_ms\":", st->start_tries);
        if (st->next_try_ms > 0)
            g_string_append_printf(out, "%" G_GINT64_FORMAT "}", st->next_try_ms);
        else
            g_string_append(out, "null}");
    } else {
        g_string_append(out, ",\"start\":null");
    }
    g_string_append(out, "}\n");
    return g_string_free(out, FALSE);
}
