/* agents.h -- sf_agents: ids handed out per user agent, counted by name for at most
 * max_tracked agents and under one "other" count beyond, so that a client inventing
 * agents can grow neither memory nor the stats answers. */
#ifndef SF_AGENTS_H
#define SF_AGENTS_H

#include <stdint.h>

/* Stripes a caller may count in: each thread keeps to one, so the hot path takes an
 * uncontended lock. */
#define SF_AGENTS_STRIPES 16

typedef struct sf_agents sf_agents;

typedef struct sf_agents_stats {
    uint64_t tracked;    /* agents counted by name (at most max_tracked) */
    uint64_t untracked;  /* distinct agents counted as "other", estimated (within ~1%
                          * up to 100,000; saturates near 700,000) */
    uint64_t other_ids;  /* ids handed out to untracked agents */
} sf_agents_stats;

/* Counts by name the first max_tracked (>= 0) distinct agents seen. */
sf_agents *sf_agents_new(int max_tracked);

/* NULL is allowed. */
void sf_agents_free(sf_agents *a);

/* Adds n ids for agent in stripe (taken modulo SF_AGENTS_STRIPES). Thread-safe. */
void sf_agents_count(sf_agents *a, unsigned stripe, const char *agent, uint64_t n);

/* Calls fn once per tracked agent, in name order, with its count over every stripe. */
typedef void (*sf_agents_fn)(const char *agent, uint64_t count, void *ctx);
void sf_agents_foreach(sf_agents *a, sf_agents_fn fn, void *ctx);

void sf_agents_get_stats(sf_agents *a, sf_agents_stats *out);

#endif /* SF_AGENTS_H */
