/* fuzz_http.c -- fuzz target of the HTTP ids port's request handling (http_answer.c): any
 * path, query parameters (count, agent, format and others, repeated or not) and Accept
 * header, answered through a real handler. The answer is checked against what the request
 * asked: a status the port gives (never 500), an agent served only when the original's
 * grammar and the length limit allow it, exactly count ids for a count in range, ids of
 * this worker in increasing order, bodies in their shapes (JSON errors valid UTF-8 without
 * a raw control character), the handler's counters moved by the ids handed out and no
 * more, and the budget of unsent bodies back to zero once the answer is given back.
 *
 * Input: a control byte (bit 0: HEAD, bit 1: POST, bit 2: the handler refuses, as while
 * fenced), then lines: the path, the Accept header (empty: none), and the parameters as
 * key=value (a line without '=' is a key without a value). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/handler.h"
#include "server/http_answer.h"
#include "server/standalone.h"
#include "lib/snowflake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_BATCH 100
#define FUZZ_MAX_AGENT 32
#define FUZZ_MAX_ARGS 16
#define FUZZ_READS_PER_MS 64
#define FUZZ_START_MS 1700000000000LL
#define FUZZ_WORKER 3
#define FUZZ_DATACENTER 4

static SfHandler *fuzz_handler;
static sf_standalone *fuzz_source;
static sf_worker *fuzz_worker;
static int64_t fuzz_reads;

/* A clock that moves one millisecond every FUZZ_READS_PER_MS reads: no run waits. */
static int64_t fuzz_clock_read(void *ctx)
{
    (void)ctx;
    return FUZZ_START_MS + ++fuzz_reads / FUZZ_READS_PER_MS;
}

static void fuzz_clock_sleep(void *ctx, int64_t ms)
{
    (void)ctx;
    fuzz_reads += ms * FUZZ_READS_PER_MS;
}

static void fuzz_init(void)
{
    sf_worker_options o;
    sf_worker_options_init(&o);
    o.worker_id = FUZZ_WORKER;
    o.datacenter_id = FUZZ_DATACENTER;
    o.clock = fuzz_clock_read;
    o.sleep = fuzz_clock_sleep;
    fuzz_worker = sf_worker_new(&o, NULL);
    sf_handler_options ho;
    sf_handler_options_init(&ho);
    ho.max_batch_size = FUZZ_MAX_BATCH;
    ho.max_useragent_length = FUZZ_MAX_AGENT;
    ho.max_tracked_useragents = 16;
    fuzz_handler = sf_handler_new(&ho);
    fuzz_source = sf_standalone_new();
    if (fuzz_worker == NULL || fuzz_source == NULL)
        abort();
    sf_handler_set_source(fuzz_handler, sf_standalone_source(fuzz_source));
}

#define FUZZ_CHECK(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_http: %s: ", #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* The value of key's first occurrence among args, or NULL; *n counts its occurrences. */
static const char *fuzz_arg(const sf_http_arg *args, size_t nargs, const char *key, int *n)
{
    const char *value = NULL;
    *n = 0;
    for (size_t i = 0; i < nargs; i++)
        if (strcmp(args[i].key, key) == 0 && (*n)++ == 0)
            value = args[i].value != NULL ? args[i].value : "";
    return value;
}

/* Reads the decimal ids of body: JSON strings or text lines alike. */
static size_t fuzz_ids_of(const char *body, int64_t *ids, size_t max)
{
    size_t n = 0;
    for (const char *p = body; *p != '\0' && n < max;) {
        if (*p < '0' || *p > '9') {
            p++;
            continue;
        }
        char *end;
        ids[n++] = (int64_t)strtoll(p, &end, 10);
        p = end;
    }
    return n;
}

/* Checks a 200's body: its shape for the route and format, and its ids. */
static void fuzz_check_ids(const sf_http_answer *a, const char *count, bool head)
{
    int64_t ids[FUZZ_MAX_BATCH + 1];
    size_t n = fuzz_ids_of(a->body, ids, FUZZ_MAX_BATCH + 1);
    size_t want = head ? 0 : a->route == SF_HTTP_ROUTE_IDS ? (size_t)atoi(count) : 1;
    FUZZ_CHECK(n == want, "%zu ids for %zu asked: %s", n, want, a->body);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(((ids[i] >> 12) & 31) == FUZZ_WORKER && ((ids[i] >> 17) & 31) == FUZZ_DATACENTER,
                   "id %lld is not this worker's", (long long)ids[i]);
        FUZZ_CHECK(i == 0 || ids[i] > ids[i - 1], "ids out of order: %s", a->body);
    }
    bool json = strcmp(a->content_type, "application/json") == 0;
    if (head)
        FUZZ_CHECK(a->len == 0, "a HEAD with a body: %s", a->body);
    else if (a->route == SF_HTTP_ROUTE_LEAF)
        FUZZ_CHECK(!json && a->body[a->len - 1] != '\n', "Leaf's answer: %s", a->body);
    else if (json)
        FUZZ_CHECK(strncmp(a->body, a->route == SF_HTTP_ROUTE_ID ? "{\"id\":\"" : "{\"ids\":[\"",
                           a->route == SF_HTTP_ROUTE_ID ? 7 : 9) == 0 &&
                       strcmp(a->body + a->len - (a->route == SF_HTTP_ROUTE_ID ? 3 : 4),
                              a->route == SF_HTTP_ROUTE_ID ? "\"}\n" : "\"]}\n") == 0,
                   "JSON shape: %s", a->body);
    else
        FUZZ_CHECK(a->body[a->len - 1] == '\n', "text shape: %s", a->body);
}

/* Checks an error's body: {"error":"...","reason":"..."} and valid UTF-8 without raw
 * control characters. */
static void fuzz_check_error(const sf_http_answer *a)
{
    FUZZ_CHECK(strcmp(a->content_type, "application/json") == 0, "error as %s", a->content_type);
    FUZZ_CHECK(strncmp(a->body, "{\"error\":\"", 10) == 0 && strstr(a->body, "\",\"reason\":\"") &&
                   strcmp(a->body + a->len - 3, "\"}\n") == 0,
               "error shape: %s", a->body);
    FUZZ_CHECK(g_utf8_validate(a->body, (gssize)a->len, NULL), "not UTF-8: %s", a->body);
    for (size_t i = 0; i + 1 < a->len; i++)
        FUZZ_CHECK((unsigned char)a->body[i] >= 0x20 && a->body[i] != 0x7f,
                   "raw control character at %zu: %s", i, a->body);
}

/* Whether the answer's agent decision agrees with the grammar and the limit. */
static void fuzz_check_agent(const sf_http_answer *a, const sf_http_request *req)
{
    int n;
    const char *agent = fuzz_arg(req->args, req->nargs, "agent", &n);
    if (n > 1)
        return; /* refused for the repetition, whatever the agent */
    if (agent == NULL)
        agent = a->route == SF_HTTP_ROUTE_LEAF ? req->path + strlen("/api/snowflake/get/") : "http";
    bool valid = strlen(agent) <= FUZZ_MAX_AGENT && sf_useragent_valid(agent);
    if (a->status == 200)
        FUZZ_CHECK(valid, "served an invalid agent \"%s\"", agent);
    if (g_str_has_prefix(a->body, "{\"error\":\"invalid_user_agent\""))
        FUZZ_CHECK(!valid, "refused a valid agent \"%s\": %s", agent, a->body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_handler == NULL)
        fuzz_init();
    if (size < 1)
        return 0;
    char *text = g_strndup((const char *)data + 1, size - 1); /* stops at a NUL, as HTTP does */
    char **lines = g_strsplit(text, "\n", FUZZ_MAX_ARGS + 2);
    sf_http_arg args[FUZZ_MAX_ARGS];
    size_t nargs = 0;
    for (size_t i = 2; lines[0] != NULL && lines[1] != NULL && lines[i] != NULL; i++) {
        char *eq = strchr(lines[i], '=');
        if (eq != NULL)
            *eq = '\0';
        args[nargs++] = (sf_http_arg){lines[i], eq != NULL ? eq + 1 : NULL};
    }
    bool head = data[0] & 1, fenced = data[0] & 4;
    sf_http_request req = {head ? "HEAD" : (data[0] & 2) ? "POST" : "GET",
                           lines[0] ? lines[0] : "/", args, nargs,
                           lines[0] && lines[1] && lines[1][0] ? lines[1] : NULL};
    sf_standalone_publish(fuzz_source, fuzz_worker, !fenced, 0, 0, "fenced by the fuzz input");
    sf_handler_stats before, after;
    sf_handler_get_stats(fuzz_handler, &before);
    sf_http_budget budget = {.max = 4096};
    sf_http_answer a;
    sf_http_answer_make(fuzz_handler, &req, &budget, &a);
    sf_handler_get_stats(fuzz_handler, &after);

    FUZZ_CHECK(a.body != NULL && strlen(a.body) == a.len, "body length %zu", a.len);
    FUZZ_CHECK(a.status == 200 || a.status == 400 || a.status == 404 || a.status == 405 ||
                   a.status == 503, "status %u: %s", a.status, a.body);
    FUZZ_CHECK(a.retry_after == (a.status == 503), "Retry-After on a %u", a.status);
    FUZZ_CHECK(!fenced || a.status != 200, "served while fenced");
    int n;
    const char *count = fuzz_arg(args, nargs, "count", &n);
    if (a.status == 200)
        fuzz_check_ids(&a, count, head);
    else
        fuzz_check_error(&a);
    bool id_route = a.route == SF_HTTP_ROUTE_ID || a.route == SF_HTTP_ROUTE_IDS ||
                    a.route == SF_HTTP_ROUTE_LEAF;
    if (id_route)
        fuzz_check_agent(&a, &req);
    uint64_t made = a.status != 200 || head              ? 0
                    : a.route == SF_HTTP_ROUTE_IDS ? (uint64_t)atoi(count)
                                                   : 1;
    FUZZ_CHECK(after.ids_generated - before.ids_generated == made, "%llu ids counted, %llu made",
               (unsigned long long)(after.ids_generated - before.ids_generated),
               (unsigned long long)made);
    FUZZ_CHECK(atomic_load(&budget.used) == a.len, "budget %zu for a body of %zu",
               atomic_load(&budget.used), a.len);
    sf_http_budget_give(&budget, a.len);
    g_free(a.body);
    g_strfreev(lines);
    g_free(text);
    return 0;
}
