/* http_answer.h -- one request of the HTTP ids port answered without a socket: its route read
 * from the path, its parameters (count, agent, format) from the query, its ids made through
 * the handler's calls as the Thrift port makes them, and the answer's status, headers and
 * body (JSON, or text). The listener (http_ids.c) and the fuzz target share it. */
#ifndef SF_HTTP_ANSWER_H
#define SF_HTTP_ANSWER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "handler.h"

/* The routes, as requests are counted by. */
typedef enum {
    SF_HTTP_ROUTE_ID,      /* /id */
    SF_HTTP_ROUTE_IDS,     /* /ids?count=N */
    SF_HTTP_ROUTE_LEAF,    /* /api/snowflake/get/{key}, as Meituan Leaf's snowflake mode */
    SF_HTTP_ROUTE_SEGMENT, /* /api/segment/get/{key}: Leaf's segment mode, not served */
    SF_HTTP_ROUTE_OTHER,   /* any other path */
    SF_HTTP_ROUTES
} sf_http_route;

/* The route's name in the figures ("/id", ..., "other"). */
const char *sf_http_route_name(sf_http_route route);

/* One parameter of the query, percent-decoded; value NULL for a key without '='. */
typedef struct sf_http_arg {
    const char *key;
    const char *value;
} sf_http_arg;

typedef struct sf_http_request {
    const char *method;     /* "GET", "HEAD", ... */
    const char *path;       /* percent-decoded, without the query */
    const sf_http_arg *args; /* in the order sent */
    size_t nargs;
    const char *accept;     /* the Accept header, NULL when absent */
} sf_http_request;

/* Bytes of answers' bodies made and not yet sent, over all connections, and the most that
 * ids may add to them: a body of ids is made only when it fits. */
typedef struct sf_http_budget {
    atomic_size_t used;
    size_t max;
} sf_http_budget;

/* Gives back n bytes of a body that was sent or dropped. */
void sf_http_budget_give(sf_http_budget *b, size_t n);

typedef struct sf_http_answer {
    sf_http_route route;
    unsigned status;          /* 200, 400, 404, 405, 500 or 503 */
    const char *content_type;
    char *body;               /* g_malloc'd, len bytes and a NUL; len charged to the budget */
    size_t len;
    bool retry_after;         /* 503: say Retry-After */
    bool over_budget;         /* 503 because the body would not fit the budget */
} sf_http_answer;

/* Answers req: routes it, checks its parameters, makes its ids through h (a HEAD makes none:
 * it gets the status and content type a GET would, from sf_handler_check_call, and an empty
 * body) and writes the body, charging its length to budget (NULL: no budget). Errors are
 * JSON, {"error":"...","reason":"..."}. Never fails: out of memory, GLib aborts. */
void sf_http_answer_make(SfHandler *h, const sf_http_request *req, sf_http_budget *budget,
                         sf_http_answer *out);

#endif /* SF_HTTP_ANSWER_H */
