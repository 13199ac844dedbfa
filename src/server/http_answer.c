/* http_answer.c -- one request of the HTTP ids port answered: the route, the query's
 * parameters checked (each route takes its own, each at most once), the agent and the count
 * through the handler's own checks, the ids from its calls, and the body written: JSON with
 * every id as a string (JavaScript's numbers lose integers above 2^53), or text, or Leaf's
 * bare decimal. Knows nothing of sockets or of libmicrohttpd. */
#include "http_answer.h"

#include <stdarg.h>
#include <string.h>

#include "json_text.h"

/* Ids as text: at most 19 digits (INT64_MAX). */
#define SF_HTTP_ID_DIGITS 19
/* The longest count quoted back in a refusal. */
#define SF_HTTP_QUOTE_MAX 32
#define SF_HTTP_JSON "application/json"
#define SF_HTTP_TEXT "text/plain; charset=utf-8"
#define SF_HTTP_LEAF_PREFIX "/api/snowflake/get/"
#define SF_HTTP_SEGMENT_PREFIX "/api/segment/get/"

static const char *const sf_http_route_names[SF_HTTP_ROUTES] = {
    "/id", "/ids", SF_HTTP_LEAF_PREFIX, SF_HTTP_SEGMENT_PREFIX, "other"};

const char *sf_http_route_name(sf_http_route route)
{
    return (unsigned)route < SF_HTTP_ROUTES ? sf_http_route_names[route] : "other";
}

/* What a request asks for, once its route and parameters are read. */
typedef struct sf_http_call {
    const char *agent; /* ?agent=, else Leaf's key, else "http" */
    const char *count; /* ?count= as sent; NULL when absent */
    bool text;         /* the answer in text: ?format=text, or Accept names text/plain alone */
} sf_http_call;

/* Takes n bytes of the budget; false (nothing taken) when they do not fit. force takes them
 * whatever the budget says: an error's body is small and must be sent. */
static bool sf_http_budget_take(sf_http_budget *b, size_t n, bool force)
{
    if (b == NULL)
        return true;
    size_t used = atomic_load_explicit(&b->used, memory_order_relaxed);
    do {
        if (!force && used + n > b->max)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->used, &used, used + n,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

void sf_http_budget_give(sf_http_budget *b, size_t n)
{
    if (b != NULL)
        atomic_fetch_sub_explicit(&b->used, n, memory_order_relaxed);
}

/* Makes out an error: status, the error's name and the reason, as JSON. */
static void sf_http_refuse(sf_http_answer *out, sf_http_budget *budget, unsigned status,
                           const char *error, const char *reason)
{
    GString *body = g_string_new("{\"error\":");
    sf_json_text(body, error);
    g_string_append(body, ",\"reason\":");
    sf_json_text(body, reason);
    g_string_append(body, "}\n");
    out->status = status;
    out->content_type = SF_HTTP_JSON;
    out->retry_after = status == 503;
    out->len = body->len;
    out->body = g_string_free(body, FALSE);
    sf_http_budget_take(budget, out->len, true);
}

/* The same, with the reason made from a format. */
static void G_GNUC_PRINTF(5, 6) sf_http_refusef(sf_http_answer *out, sf_http_budget *budget,
                                                unsigned status, const char *error,
                                                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *reason = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    sf_http_refuse(out, budget, status, error, reason);
    g_free(reason);
}

/* The answer to each refusal of the handler: its status and the error's name. */
static const struct {
    unsigned status;
    const char *error;
} sf_http_refusals[] = {
    [SF_HANDLER_INVALID_SYSTEM_CLOCK] = {503, "invalid_system_clock"},
    [SF_HANDLER_INVALID_USER_AGENT] = {400, "invalid_user_agent"},
    [SF_HANDLER_INVALID_REQUEST] = {400, "invalid_request"},
    [SF_HANDLER_SERVICE_UNAVAILABLE] = {503, "service_unavailable"},
};

/* Makes out the answer to a refusal by the handler (taken); an outcome it does not know is
 * a 500, which no request should ever get. */
static void sf_http_refuse_call(sf_http_answer *out, sf_http_budget *budget, GError *refusal)
{
    unsigned o = (unsigned)refusal->code;
    if (o < G_N_ELEMENTS(sf_http_refusals) && sf_http_refusals[o].error != NULL)
        sf_http_refuse(out, budget, sf_http_refusals[o].status, sf_http_refusals[o].error,
                       refusal->message);
    else
        sf_http_refusef(out, budget, 500, "internal_error", "the handler answered %u, which "
                        "this port does not know", o);
    g_error_free(refusal);
}

/* The route of a path; *key receives Leaf's key (the rest of the path) on its route. */
static sf_http_route sf_http_route_of(const char *path, const char **key)
{
    if (strcmp(path, "/id") == 0)
        return SF_HTTP_ROUTE_ID;
    if (strcmp(path, "/ids") == 0)
        return SF_HTTP_ROUTE_IDS;
    if (g_str_has_prefix(path, SF_HTTP_LEAF_PREFIX)) {
        *key = path + strlen(SF_HTTP_LEAF_PREFIX);
        return **key != '\0' && strchr(*key, '/') == NULL ? SF_HTTP_ROUTE_LEAF
                                                          : SF_HTTP_ROUTE_OTHER;
    }
    if (g_str_has_prefix(path, SF_HTTP_SEGMENT_PREFIX))
        return SF_HTTP_ROUTE_SEGMENT;
    return SF_HTTP_ROUTE_OTHER;
}

/* TRUE when the Accept header asks for text: it names text/plain and not application/json
 * (a browser's or curl's default gets JSON). */
static bool sf_http_accepts_text_only(const char *accept)
{
    bool text = false, json = false;
    for (const char *r = accept; *r != '\0';) { /* read in place: no copy per request */
        size_t len = strcspn(r, ","), type = strcspn(r, ";,");
        const char *start = r;
        while (type > 0 && g_ascii_isspace(*start)) {
            start++;
            type--;
        }
        while (type > 0 && g_ascii_isspace(start[type - 1]))
            type--;
        text = text || (type == 10 && g_ascii_strncasecmp(start, "text/plain", 10) == 0);
        json = json || (type == 16 && g_ascii_strncasecmp(start, "application/json", 16) == 0);
        r += len + (r[len] == ',');
    }
    return text && !json;
}

/* Reads the query's parameters into call: each route takes its own (count only /ids, format
 * not Leaf's), each at most once. FALSE after making out a 400 naming the bad one. */
static bool sf_http_read_args(const sf_http_request *req, sf_http_route route,
                              sf_http_call *call, sf_http_answer *out, sf_http_budget *budget)
{
    const char *format = NULL, *agent = NULL;
    const char *allowed = route == SF_HTTP_ROUTE_IDS    ? "count, agent or format"
                          : route == SF_HTTP_ROUTE_LEAF ? "agent"
                                                        : "agent or format";
    for (size_t i = 0; i < req->nargs; i++) {
        const char *key = req->args[i].key, *value = req->args[i].value;
        const char **slot = strcmp(key, "agent") == 0 ? &agent
                            : strcmp(key, "format") == 0 && route != SF_HTTP_ROUTE_LEAF ? &format
                            : strcmp(key, "count") == 0 && route == SF_HTTP_ROUTE_IDS ? &call->count
                                                                                       : NULL;
        if (slot == NULL || *slot != NULL) {
            sf_http_refusef(out, budget, 400, "invalid_request",
                            slot == NULL ? "parameter '%s' is not known to %s: allowed %s"
                                         : "parameter '%s' is given twice to %s: allowed %s, "
                                           "each once",
                            key, sf_http_route_name(route), allowed);
            return false;
        }
        *slot = value != NULL ? value : "";
    }
    if (agent != NULL)
        call->agent = agent;
    if (format == NULL)
        call->text = req->accept != NULL && sf_http_accepts_text_only(req->accept);
    else if (strcmp(format, "text") == 0 || strcmp(format, "json") == 0)
        call->text = strcmp(format, "text") == 0;
    else {
        sf_http_refusef(out, budget, 400, "invalid_request",
                        "format '%.*s' is not valid: allowed json or text", SF_HTTP_QUOTE_MAX,
                        format);
        return false;
    }
    return true;
}

/* Reads call's count for get_ids: a decimal of at most 2^31 - 1 (the handler refuses one
 * outside 1..max_batch_size itself, counting it). FALSE after making out a 400. */
static bool sf_http_read_count(SfHandler *h, const sf_http_call *call, int32_t *count,
                               sf_http_answer *out, sf_http_budget *budget)
{
    int64_t v;
    if (call->count == NULL) {
        sf_http_refusef(out, budget, 400, "invalid_request",
                        "count is missing: /ids?count=N with N in 1..%d (max_batch_size)",
                        sf_handler_max_batch_size(h));
        return false;
    }
    if (sf_id_parse(call->count, SF_BASE10, &v, NULL) != SF_OK || v > INT32_MAX) {
        sf_http_refusef(out, budget, 400, "invalid_request",
                        "count '%.*s%s' is not a number in the allowed range 1..%d "
                        "(max_batch_size; digits only)", SF_HTTP_QUOTE_MAX, call->count,
                        strlen(call->count) > SF_HTTP_QUOTE_MAX ? "..." : "",
                        sf_handler_max_batch_size(h));
        return false;
    }
    *count = (int32_t)v;
    return true;
}

/* Writes ids as the route and the format want them into out, in room bytes taken from the
 * budget (every id quoted, with its comma, the brackets, the newline, and room for the last
 * id's encoding) and gives back what is left: JSON {"id":"..."} or {"ids":["...",...]},
 * text one id a line, Leaf's the bare decimal. */
static void sf_http_write_ids(sf_http_route route, bool text, const int64_t *ids, size_t n,
                              size_t room, sf_http_answer *out, sf_http_budget *budget)
{
    bool json = !text && route != SF_HTTP_ROUTE_LEAF, one = route != SF_HTTP_ROUTE_IDS;
    const char *open = !json ? "" : one ? "{\"id\":" : "{\"ids\":[";
    const char *close = !json ? "" : one ? "}\n" : "]}\n";
    bool lines = !json && route != SF_HTTP_ROUTE_LEAF; /* Leaf's: the bare decimal */
    const char *quote = json ? "\"" : "", *after = json ? "\"," : lines ? "\n" : "";
    char *body = g_malloc(room + 1), *p = g_stpcpy(body, open);
    for (size_t i = 0; i < n; i++) {
        p = g_stpcpy(p, quote);
        sf_id_encode(ids[i], SF_BASE10, p, SF_ID_TEXT_MAX, NULL);
        p = g_stpcpy(p + strlen(p), after);
    }
    if (json)
        p--; /* the last comma */
    p = g_stpcpy(p, close);
    out->len = (size_t)(p - body);
    sf_http_budget_give(budget, room - out->len); /* room was taken before the ids were made */
    out->status = 200;
    out->content_type = json ? SF_HTTP_JSON : SF_HTTP_TEXT;
    out->body = body;
}

/* Makes the ids of a GET (count for /ids, one otherwise) through the handler, and writes
 * them; or, for a HEAD, asks the handler whether it would. */
static void sf_http_call_handler(SfHandler *h, const sf_http_request *req, sf_http_route route,
                                 const sf_http_call *call, sf_http_answer *out,
                                 sf_http_budget *budget)
{
    bool batch = route == SF_HTTP_ROUTE_IDS;
    int32_t count = 1;
    if (batch && !sf_http_read_count(h, call, &count, out, budget))
        return;
    GError *refusal = NULL;
    if (strcmp(req->method, "HEAD") == 0) {
        if (!sf_handler_check_call(h, call->agent, batch, count, &refusal)) {
            sf_http_refuse_call(out, budget, refusal);
            return;
        }
        out->status = 200;
        out->content_type = call->text || route == SF_HTTP_ROUTE_LEAF ? SF_HTTP_TEXT : SF_HTTP_JSON;
        out->body = g_strdup("");
        return;
    }
    /* A count the handler refuses is refused before any room for ids is needed. */
    size_t n = count >= 1 && count <= sf_handler_max_batch_size(h) ? (size_t)count : 0;
    size_t room = n * (SF_HTTP_ID_DIGITS + 3) + 16;
    if (!sf_http_budget_take(budget, room, false)) {
        out->over_budget = true;
        sf_http_refusef(out, budget, 503, "overloaded", "answers waiting to be sent hold the "
                        "most the node keeps (max_output_buffer, %zu bytes)", budget->max);
        return;
    }
    int64_t one, *ids = n > 1 ? g_new(int64_t, n) : &one;
    gboolean made = batch ? sf_handler_call_get_ids(h, call->agent, count, n > 0 ? ids : NULL,
                                                    &refusal)
                          : sf_handler_call_get_id(h, call->agent, ids, &refusal);
    if (made)
        sf_http_write_ids(route, call->text, ids, n, room, out, budget);
    else {
        sf_http_budget_give(budget, room);
        sf_http_refuse_call(out, budget, refusal);
    }
    if (ids != &one)
        g_free(ids);
}

void sf_http_answer_make(SfHandler *h, const sf_http_request *req, sf_http_budget *budget,
                         sf_http_answer *out)
{
    const char *key = NULL;
    memset(out, 0, sizeof *out);
    out->route = sf_http_route_of(req->path, &key);
    if (out->route == SF_HTTP_ROUTE_SEGMENT)
        sf_http_refusef(out, budget, 404, "not_found", "%s is Leaf's segment mode, which this "
                        "node does not serve: it hands out Snowflake ids, from "
                        "/api/snowflake/get/{key}, /id and /ids?count=N", req->path);
    else if (out->route == SF_HTTP_ROUTE_OTHER)
        sf_http_refusef(out, budget, 404, "not_found", "no such path %s: the routes are /id, "
                        "/ids?count=N and /api/snowflake/get/{key}", req->path);
    else if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0)
        sf_http_refusef(out, budget, 405, "method_not_allowed", "%s answers GET and HEAD, not %s",
                        req->path, req->method);
    else {
        sf_http_call call = {.agent = key != NULL ? key : "http"};
        if (sf_http_read_args(req, out->route, &call, out, budget))
            sf_http_call_handler(h, req, out->route, &call, out, budget);
    }
}
