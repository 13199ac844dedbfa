/* idcheck.c -- proves a stream of ids from many clients of many servers clean.
 *
 * Input, from files or standard input, one id per line:
 *     CONNECTION WORKER_ID DATACENTER_ID ID
 * where CONNECTION names the client connection that received ID (any token
 * without spaces; ids on one connection must strictly increase) and
 * WORKER_ID / DATACENTER_ID are what the issuing server reported for itself.
 * Lines starting with '#' are skipped.
 *
 * Reports duplicates (over all ids), ids that do not increase on their
 * connection, and ids whose decoded worker or datacenter differ from what
 * their server reported.
 *
 * Handovers and overlap: the part of CONNECTION before its first '-' names
 * the node that issued the id (the whole name without one). Ordered by their
 * timestamps, the ids of one (datacenter, worker) pair fall into runs, each
 * from one node; where the node changes, a handover, the new holder's first
 * id must come in a later millisecond than the old holder's last one: the
 * margin (first - last, ms) must be > 0. A margin of 0 or less is an
 * overlap: two nodes made ids under one worker id in the same millisecond,
 * which only fencing keeps from repeating an id. Every handover is printed
 * ("handover DC WORKER OLD NEW LAST_MS FIRST_MS MARGIN_MS"), so a harness
 * can tie each to the fault that caused it. Ids from the node "buffer" came through a
 * client's prefetch buffer, whose issuer is not known: they count for duplicates, fields
 * and order, not for handovers.
 *
 * Exit 0 when clean, 1 on any finding, 2 on bad input. Ids are kept as a
 * flat array of int64 and radix-sorted, plus 16 bytes per id for the
 * handovers, so 100 million ids take about 3.2 GB. */
#define _POSIX_C_SOURCE 200809L
#include "lib/snowflake.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDCHECK_EXAMPLES 5

typedef struct idcheck_conn {
    char *name;
    int64_t last_id;
    struct idcheck_conn *next; /* hash chain */
} idcheck_conn;

/* One id's place in its worker's history: the key orders by (datacenter, worker),
 * then time and sequence; node is the issuing node's index in nodes. */
typedef struct idcheck_mark {
    uint64_t key;
    uint32_t node;
} idcheck_mark;

typedef struct idcheck {
    int64_t *ids;
    idcheck_mark *marks;
    size_t count, cap;
    char **nodes;
    size_t nnodes;
    idcheck_conn **buckets;
    size_t nbuckets, nconns;
    uint64_t not_increasing, wrong_fields, bad_lines;
} idcheck;

static void *idcheck_xalloc(void *p, size_t size)
{
    void *q = realloc(p, size);
    if (q == NULL) {
        fprintf(stderr, "idcheck: out of memory allocating %zu bytes\n", size);
        exit(2);
    }
    return q;
}

static uint64_t idcheck_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Finds or adds the connection named name. */
static idcheck_conn *idcheck_conn_get(idcheck *c, const char *name)
{
    if (c->nconns >= c->nbuckets) {
        size_t n = c->nbuckets ? c->nbuckets * 2 : 1024;
        idcheck_conn **b = calloc(n, sizeof *b);
        if (b == NULL) {
            fprintf(stderr, "idcheck: out of memory for %zu connections\n", c->nconns);
            exit(2);
        }
        for (size_t i = 0; i < c->nbuckets; i++)
            for (idcheck_conn *e = c->buckets[i], *next; e != NULL; e = next) {
                next = e->next;
                size_t h = idcheck_hash(e->name) & (n - 1);
                e->next = b[h];
                b[h] = e;
            }
        free(c->buckets);
        c->buckets = b;
        c->nbuckets = n;
    }
    size_t h = idcheck_hash(name) & (c->nbuckets - 1);
    for (idcheck_conn *e = c->buckets[h]; e != NULL; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    idcheck_conn *e = idcheck_xalloc(NULL, sizeof *e);
    e->name = strdup(name);
    if (e->name == NULL) {
        fprintf(stderr, "idcheck: out of memory\n");
        exit(2);
    }
    e->last_id = -1;
    e->next = c->buckets[h];
    c->buckets[h] = e;
    c->nconns++;
    return e;
}

/* The index of the node that issued ids on connection conn_name: the name up to its
 * first '-'. Nodes are few; a linear search is enough. */
#define IDCHECK_NODE_UNKNOWN (UINT32_MAX - 1)
static uint32_t idcheck_node(idcheck *c, const char *conn_name)
{
    size_t len = strcspn(conn_name, "-");
    if (len == strlen("buffer") && strncmp(conn_name, "buffer", len) == 0)
        return IDCHECK_NODE_UNKNOWN;
    for (size_t i = 0; i < c->nnodes; i++)
        if (strlen(c->nodes[i]) == len && strncmp(c->nodes[i], conn_name, len) == 0)
            return (uint32_t)i;
    c->nodes = idcheck_xalloc(c->nodes, (c->nnodes + 1) * sizeof *c->nodes);
    c->nodes[c->nnodes] = strndup(conn_name, len);
    if (c->nodes[c->nnodes] == NULL) {
        fprintf(stderr, "idcheck: out of memory\n");
        exit(2);
    }
    return (uint32_t)c->nnodes++;
}

static void idcheck_add(idcheck *c, const char *conn_name, int64_t worker, int64_t dc, int64_t id)
{
    idcheck_conn *conn = idcheck_conn_get(c, conn_name);
    if (id <= conn->last_id) {
        if (c->not_increasing++ < IDCHECK_EXAMPLES)
            printf("not increasing: connection %s got %" PRId64 " after %" PRId64 "\n", conn_name,
                   id, conn->last_id);
    } else {
        conn->last_id = id;
    }
    sf_decoded d;
    if (sf_decode(id, SF_TWITTER_EPOCH_MS, &d, NULL) != SF_OK || d.worker_id != worker ||
        d.datacenter_id != dc) {
        if (c->wrong_fields++ < IDCHECK_EXAMPLES)
            printf("wrong fields: id %" PRId64 " decodes to worker %" PRId64 " datacenter %" PRId64
                   ", its server reported worker %" PRId64 " datacenter %" PRId64 "\n",
                   id, d.worker_id, d.datacenter_id, worker, dc);
    }
    if (c->count == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1 << 20;
        c->ids = idcheck_xalloc(c->ids, c->cap * sizeof *c->ids);
        c->marks = idcheck_xalloc(c->marks, c->cap * sizeof *c->marks);
    }
    uint64_t pair = (uint64_t)(id >> SF_WORKER_ID_SHIFT) & 0x3FF; /* datacenter, worker */
    uint64_t ts = (uint64_t)id >> SF_TIMESTAMP_SHIFT;
    uint64_t seq = (uint64_t)id & SF_SEQUENCE_MASK;
    c->marks[c->count].key = pair << 53 | ts << 12 | seq;
    c->marks[c->count].node = idcheck_node(c, conn_name);
    c->ids[c->count++] = id;
}

/* Parses "CONN WORKER DC ID"; false on anything else. */
static bool idcheck_parse_line(char *line, char **conn, int64_t v[3])
{
    char *save = NULL;
    *conn = strtok_r(line, " \t\r\n", &save);
    if (*conn == NULL)
        return false;
    for (int i = 0; i < 3; i++) {
        char *tok = strtok_r(NULL, " \t\r\n", &save), *end;
        if (tok == NULL)
            return false;
        errno = 0;
        v[i] = strtoll(tok, &end, 10);
        if (errno != 0 || *end != '\0')
            return false;
    }
    return strtok_r(NULL, " \t\r\n", &save) == NULL;
}

static void idcheck_read(idcheck *c, FILE *in, const char *name)
{
    char *line = NULL;
    size_t cap = 0;
    uint64_t lineno = 0;
    while (getline(&line, &cap, in) != -1) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char *conn;
        int64_t v[3];
        if (!idcheck_parse_line(line, &conn, v)) {
            if (c->bad_lines++ < IDCHECK_EXAMPLES)
                fprintf(stderr, "idcheck: %s:%" PRIu64 ": expected CONNECTION WORKER DATACENTER ID\n",
                        name, lineno);
            continue;
        }
        idcheck_add(c, conn, v[0], v[1], v[2]);
    }
    free(line);
}

/* LSD radix sort on 16-bit digits; ids are non-negative or flagged above,
 * and the sign bit is flipped so negatives would still sort first. */
static void idcheck_sort(int64_t *ids, size_t n)
{
    uint64_t *a = (uint64_t *)ids;
    uint64_t *tmp = idcheck_xalloc(NULL, n * sizeof *tmp);
    size_t *count = idcheck_xalloc(NULL, 65536 * sizeof *count);
    for (size_t i = 0; i < n; i++)
        a[i] ^= 1ULL << 63;
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, 65536 * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[(a[i] >> shift) & 0xFFFF]++;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t k = count[d];
            count[d] = sum;
            sum += k;
        }
        for (size_t i = 0; i < n; i++)
            tmp[count[(a[i] >> shift) & 0xFFFF]++] = a[i];
        uint64_t *swap = a;
        a = tmp;
        tmp = swap;
    }
    /* Four passes: the sorted data is back in the caller's array. */
    for (size_t i = 0; i < n; i++)
        a[i] ^= 1ULL << 63;
    free(tmp);
    free(count);
}

static uint64_t idcheck_duplicates(int64_t *ids, size_t n)
{
    uint64_t dups = 0;
    idcheck_sort(ids, n);
    for (size_t i = 1; i < n; i++)
        if (ids[i] == ids[i - 1]) {
            if (dups++ < IDCHECK_EXAMPLES) {
                sf_decoded d;
                char when[SF_ISO8601_MAX];
                sf_decode(ids[i], SF_TWITTER_EPOCH_MS, &d, NULL);
                printf("duplicate: id %" PRId64 " (%s, datacenter %" PRId64 ", worker %" PRId64
                       ", sequence %" PRId64 ")\n",
                       ids[i], sf_format_iso8601(d.timestamp_ms, when, sizeof when),
                       d.datacenter_id, d.worker_id, d.sequence);
            }
        }
    return dups;
}

static int idcheck_mark_cmp(const void *a, const void *b)
{
    const idcheck_mark *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* A node's uninterrupted run of ids under one worker id. */
typedef struct idcheck_run {
    uint32_t node;
    int64_t first, last; /* ms since the epoch */
} idcheck_run;

/* Prints every handover of a worker id between nodes with its margin; returns how many
 * overlap, and fills the smallest margin seen (INT64_MAX without any). A handover
 * overlaps when its margin is <= 0, or when the worker id comes back to the node that
 * held it within IDCHECK_MIN_TENURE_MS: so short a tenure in between is two nodes
 * taking turns within the same few milliseconds, not a claim (which waits for a
 * ZooKeeper session to end). */
#define IDCHECK_MIN_TENURE_MS 100
static uint64_t idcheck_handovers(idcheck *c, uint64_t *handovers, int64_t *min_margin)
{
    uint64_t overlaps = 0;
    *handovers = 0;
    *min_margin = INT64_MAX;
    if (c->count > 0) /* qsort's array may not be NULL, even when empty */
        qsort(c->marks, c->count, sizeof *c->marks, idcheck_mark_cmp);
    idcheck_run before = { UINT32_MAX, 0, 0 }, run = { UINT32_MAX, 0, 0 };
    uint64_t last_pair = UINT64_MAX; /* of the last id from a known node */
    for (size_t i = 0; i < c->count; i++) {
        const idcheck_mark *m = &c->marks[i];
        if (m->node == IDCHECK_NODE_UNKNOWN)
            continue;
        int64_t ts = (int64_t)((m->key >> 12) & ((1ULL << 41) - 1));
        bool same_worker = last_pair == m->key >> 53;
        last_pair = m->key >> 53;
        if (same_worker && m->node == run.node) {
            run.last = ts;
            continue;
        }
        if (!same_worker) {
            before.node = run.node = UINT32_MAX;
        } else {
            int64_t margin = ts - run.last;
            bool back = before.node == m->node && ts - before.last < IDCHECK_MIN_TENURE_MS;
            bool overlap = margin <= 0 || back;
            (*handovers)++;
            overlaps += overlap;
            if (margin < *min_margin)
                *min_margin = margin;
            printf("handover %" PRIu64 " %" PRIu64 " %s %s %" PRId64 " %" PRId64 " %" PRId64
                   "%s\n", (uint64_t)(m->key >> 58), (uint64_t)((m->key >> 53) & 0x1F),
                   c->nodes[run.node], c->nodes[m->node], (int64_t)(run.last + SF_TWITTER_EPOCH_MS),
                   (int64_t)(ts + SF_TWITTER_EPOCH_MS), margin,
                   margin <= 0 ? " OVERLAP" : back ? " OVERLAP (back within 100 ms)" : "");
        }
        before = run;
        run.node = m->node;
        run.first = run.last = ts;
    }
    return overlaps;
}

static void idcheck_free(idcheck *c)
{
    for (size_t i = 0; i < c->nbuckets; i++)
        for (idcheck_conn *e = c->buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            free(e->name);
            free(e);
        }
    free(c->buckets);
    free(c->ids);
    free(c->marks);
    for (size_t i = 0; i < c->nnodes; i++)
        free(c->nodes[i]);
    free(c->nodes);
}

int main(int argc, char **argv)
{
    idcheck c = { 0 };
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("Usage: idcheck [FILE...]\n"
               "Reads lines 'CONNECTION WORKER_ID DATACENTER_ID ID' (standard input without\n"
               "files) and reports duplicate ids, ids not increasing on their connection, and\n"
               "ids whose worker/datacenter differ from what their server reported; and every\n"
               "handover of a worker id between nodes (the connection name up to its first '-'\n"
               "names the node), with the margin between the old holder's last id and the new\n"
               "one's first: 0 ms or less is an overlap.\n"
               "Exit 0 clean, 1 on any finding, 2 on unreadable or malformed input.\n");
        return 0;
    }
    if (argc == 1)
        idcheck_read(&c, stdin, "stdin");
    for (int i = 1; i < argc; i++) {
        FILE *in = fopen(argv[i], "r");
        if (in == NULL) {
            fprintf(stderr, "idcheck: cannot open %s: %s\n", argv[i], strerror(errno));
            return 2;
        }
        idcheck_read(&c, in, argv[i]);
        fclose(in);
    }
    uint64_t dups = idcheck_duplicates(c.ids, c.count);
    uint64_t handovers;
    int64_t min_margin;
    uint64_t overlaps = idcheck_handovers(&c, &handovers, &min_margin);
    printf("idcheck: %zu ids from %zu nodes on %zu connections: %" PRIu64 " handovers, "
           "%" PRIu64 " overlapping, smallest margin %s%" PRId64 " ms\n",
           c.count, c.nnodes, c.nconns, handovers, overlaps, handovers ? "" : "(none) ",
           handovers ? min_margin : 0);
    printf("idcheck: %zu ids on %zu connections: %" PRIu64 " duplicates, %" PRIu64
           " not increasing, %" PRIu64 " with wrong worker/datacenter, %" PRIu64
           " malformed lines\n",
           c.count, c.nconns, dups, c.not_increasing, c.wrong_fields, c.bad_lines);
    int rc = c.bad_lines > 0 ? 2
             : (dups || c.not_increasing || c.wrong_fields || overlaps) ? 1 : 0;
    idcheck_free(&c);
    return rc;
}
