/* agents.c -- sf_agents: per-agent id counts, bounded in the number of agents.
 *
 * Each stripe (one per calling thread) keeps its own table of counts under its own lock,
 * so the hot path never waits on another thread. Which agents may be counted by name is
 * decided once per agent, globally: the first max_tracked distinct agents are admitted;
 * once the admitted set is full it never changes again and is read without a lock. The
 * ids of any other agent go to the stripe's "other" count, and the agent's hash sets one
 * bit of a fixed bitmap from which the number of distinct untracked agents is estimated
 * (linear counting), in constant memory. */
#include "agents.h"

#include <glib.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

/* Bits of the untracked-agent bitmap: 8 KiB. */
#define SF_AGENTS_SKETCH_BITS 65536

typedef struct sf_agents_stripe {
    _Alignas(64) GMutex lock;
    GHashTable *counts;  /* agent (the admitted set's copy) -> uint64_t * ids */
    uint64_t other_ids;  /* under lock */
} sf_agents_stripe;

struct sf_agents {
    sf_agents_stripe stripes[SF_AGENTS_STRIPES];
    int max_tracked;
    GMutex admit_lock;         /* guards admitted until full is set */
    GHashTable *admitted;      /* the names counted by name: the one copy of each, which
                                * the stripes' tables point to; never shrinks */
    atomic_bool full;          /* admitted holds max_tracked names and is frozen */
    atomic_uint_fast64_t sketch[SF_AGENTS_SKETCH_BITS / 64];
};

sf_agents *sf_agents_new(int max_tracked)
{
    sf_agents *a = aligned_alloc(64, sizeof *a);
    if (a == NULL)
        g_error("out of memory allocating the per-agent counters");
    for (int i = 0; i < SF_AGENTS_STRIPES; i++) {
        g_mutex_init(&a->stripes[i].lock);
        a->stripes[i].counts = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free);
        a->stripes[i].other_ids = 0;
    }
    a->max_tracked = max_tracked > 0 ? max_tracked : 0;
    g_mutex_init(&a->admit_lock);
    a->admitted = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    atomic_init(&a->full, a->max_tracked == 0);
    for (size_t i = 0; i < G_N_ELEMENTS(a->sketch); i++)
        atomic_init(&a->sketch[i], 0);
    return a;
}

void sf_agents_free(sf_agents *a)
{
    if (a == NULL)
        return;
    for (int i = 0; i < SF_AGENTS_STRIPES; i++) {
        g_hash_table_unref(a->stripes[i].counts);
        g_mutex_clear(&a->stripes[i].lock);
    }
    g_hash_table_unref(a->admitted); /* after the stripes: it owns the names */
    g_mutex_clear(&a->admit_lock);
    free(a);
}

/* The admitted set's copy of agent when it may be counted by name (already admitted, or
 * admitted now while there is room); NULL otherwise. Each name is stored once, however
 * many stripes count it, so memory stays under max_tracked names. */
static const char *sf_agents_admit(sf_agents *a, const char *agent)
{
    gpointer name = NULL;
    if (atomic_load_explicit(&a->full, memory_order_acquire))
        return g_hash_table_lookup_extended(a->admitted, agent, &name, NULL) ? name : NULL;
    g_mutex_lock(&a->admit_lock);
    if (!g_hash_table_lookup_extended(a->admitted, agent, &name, NULL) &&
        g_hash_table_size(a->admitted) < (guint)a->max_tracked) {
        name = g_strdup(agent);
        g_hash_table_add(a->admitted, name);
        if (g_hash_table_size(a->admitted) >= (guint)a->max_tracked)
            atomic_store_explicit(&a->full, true, memory_order_release);
    }
    g_mutex_unlock(&a->admit_lock);
    return name;
}

/* Marks agent in the bitmap of untracked agents. */
static void sf_agents_sketch_add(sf_agents *a, const char *agent)
{
    /* FNV-1a, 64-bit: a hash of our own, so that the bit does not depend on GLib's. */
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)agent; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h ^= h >> 29;
    unsigned bit = (unsigned)(h % SF_AGENTS_SKETCH_BITS);
    uint64_t mask = 1ull << (bit % 64);
    if (!(atomic_load_explicit(&a->sketch[bit / 64], memory_order_relaxed) & mask))
        atomic_fetch_or_explicit(&a->sketch[bit / 64], mask, memory_order_relaxed);
}

void sf_agents_count(sf_agents *a, unsigned stripe, const char *agent, uint64_t n)
{
    sf_agents_stripe *s = &a->stripes[stripe % SF_AGENTS_STRIPES];
    g_mutex_lock(&s->lock);
    uint64_t *count = g_hash_table_lookup(s->counts, agent);
    const char *name;
    if (count != NULL) {
        *count += n;
    } else if ((name = sf_agents_admit(a, agent)) != NULL) {
        count = g_new(uint64_t, 1);
        *count = n;
        g_hash_table_insert(s->counts, (gpointer)name, count);
    } else {
        s->other_ids += n;
        sf_agents_sketch_add(a, agent);
    }
    g_mutex_unlock(&s->lock);
}

void sf_agents_foreach(sf_agents *a, sf_agents_fn fn, void *ctx)
{
    /* Merge the stripes first so each agent is reported once, in name order. */
    GHashTable *merged = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    for (int i = 0; i < SF_AGENTS_STRIPES; i++) {
        sf_agents_stripe *s = &a->stripes[i];
        GHashTableIter it;
        gpointer key, value;
        g_mutex_lock(&s->lock);
        g_hash_table_iter_init(&it, s->counts);
        while (g_hash_table_iter_next(&it, &key, &value)) {
            uint64_t *sum = g_hash_table_lookup(merged, key);
            if (sum == NULL) {
                sum = g_new0(uint64_t, 1);
                g_hash_table_insert(merged, g_strdup(key), sum);
            }
            *sum += *(uint64_t *)value;
        }
        g_mutex_unlock(&s->lock);
    }
    GList *keys = g_list_sort(g_hash_table_get_keys(merged), (GCompareFunc)g_strcmp0);
    for (GList *k = keys; k != NULL; k = k->next)
        fn(k->data, *(uint64_t *)g_hash_table_lookup(merged, k->data), ctx);
    g_list_free(keys);
    g_hash_table_unref(merged);
}

void sf_agents_get_stats(sf_agents *a, sf_agents_stats *out)
{
    out->other_ids = 0;
    for (int i = 0; i < SF_AGENTS_STRIPES; i++) {
        g_mutex_lock(&a->stripes[i].lock);
        out->other_ids += a->stripes[i].other_ids;
        g_mutex_unlock(&a->stripes[i].lock);
    }
    g_mutex_lock(&a->admit_lock);
    out->tracked = g_hash_table_size(a->admitted);
    g_mutex_unlock(&a->admit_lock);
    unsigned zeros = 0;
    for (size_t i = 0; i < G_N_ELEMENTS(a->sketch); i++)
        zeros += 64u - (unsigned)__builtin_popcountll(
                           atomic_load_explicit(&a->sketch[i], memory_order_relaxed));
    /* Linear counting: n = -m ln(zeros / m); with no zero bit left, the most it can say. */
    double m = SF_AGENTS_SKETCH_BITS;
    out->untracked = (uint64_t)llround(-m * log((zeros > 0 ? zeros : 1) / m));
}
