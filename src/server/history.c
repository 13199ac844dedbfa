/* history.c -- sf_history: a ring of one sample a second over the last ten minutes, taken by
 * a thread of its own, rendered as JSON for the status page and the fleet page. */
#include "history.h"

typedef struct sf_history_sample {
    int64_t mono_ms;
    uint64_t ids;
    gboolean serving;
} sf_history_sample;

struct sf_history {
    GMutex lock; /* guards everything below */
    GCond wake;
    gboolean stop;
    sf_history_sample ring[SF_HISTORY_SAMPLES];
    size_t head, count; /* the oldest sample, and how many there are */
    sf_history_sample_fn fn;
    void *ctx;
    GThread *thread;
};

/* Takes a sample every interval, on the monotonic clock, until stopped. */
static gpointer sf_history_run(gpointer data)
{
    sf_history *h = data;
    gint64 next = g_get_monotonic_time();
    g_mutex_lock(&h->lock);
    while (!h->stop) {
        g_mutex_unlock(&h->lock);
        sf_history_sample s = {g_get_monotonic_time() / 1000, 0, FALSE};
        h->fn(h->ctx, &s.ids, &s.serving);
        g_mutex_lock(&h->lock);
        h->ring[(h->head + h->count) % SF_HISTORY_SAMPLES] = s;
        if (h->count < SF_HISTORY_SAMPLES)
            h->count++;
        else
            h->head = (h->head + 1) % SF_HISTORY_SAMPLES;
        /* The next second on the schedule; after a stall, from now (no burst to catch up). */
        next += SF_HISTORY_INTERVAL_MS * 1000;
        if (next < g_get_monotonic_time())
            next = g_get_monotonic_time() + SF_HISTORY_INTERVAL_MS * 1000;
        while (!h->stop && g_cond_wait_until(&h->wake, &h->lock, next))
            ;
    }
    g_mutex_unlock(&h->lock);
    return NULL;
}

sf_history *sf_history_start(sf_history_sample_fn fn, void *ctx)
{
    sf_history *h = g_new0(sf_history, 1);
    g_mutex_init(&h->lock);
    g_cond_init(&h->wake);
    h->fn = fn;
    h->ctx = ctx;
    h->thread = g_thread_new("history", sf_history_run, h);
    return h;
}

char *sf_history_render_json(sf_history *h)
{
    GString *out = g_string_new(NULL);
    g_mutex_lock(&h->lock);
    g_string_append_printf(out, "{\"interval_ms\":%d,\"now_ms\":%" G_GINT64_FORMAT
                           ",\"now_mono_ms\":%" G_GINT64_FORMAT ",\"samples\":[",
                           SF_HISTORY_INTERVAL_MS, g_get_real_time() / 1000,
                           g_get_monotonic_time() / 1000);
    for (size_t i = 0; i < h->count; i++) {
        const sf_history_sample *s = &h->ring[(h->head + i) % SF_HISTORY_SAMPLES];
        g_string_append_printf(out, "%s[%" G_GINT64_FORMAT ",%" G_GUINT64_FORMAT ",%d]",
                               i ? "," : "", s->mono_ms, s->ids, s->serving ? 1 : 0);
    }
    g_mutex_unlock(&h->lock);
    g_string_append(out, "]}\n");
    return g_string_free(out, FALSE);
}

void sf_history_stop(sf_history *h)
{
    if (h == NULL)
        return;
    g_mutex_lock(&h->lock);
    h->stop = TRUE;
    g_cond_broadcast(&h->wake);
    g_mutex_unlock(&h->lock);
    g_thread_join(h->thread);
    g_cond_clear(&h->wake);
    g_mutex_clear(&h->lock);
    g_free(h);
}
