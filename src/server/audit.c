/* audit.c -- sf_audit: the audit log of every id handed out.
 *
 * The original's Reporter sent one AuditLogEntry {id, useragent, tag} per id to scribe
 * (category "snowflake"), each message the base64 of the entry's binary serialization and a
 * newline, in Log calls of up to 100, from a bounded queue that dropped (and counted) what
 * did not fit, so that a slow collector never slowed id generation. This does the same, and
 * can append the entries to a JSON-lines file instead. The request threads only copy ids into
 * the queue under a short lock; one thread of ours does all the I/O, retrying a failed batch
 * with a backoff so that nothing queued is lost while the sink is down. */
#define _GNU_SOURCE
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/transport/thrift_framed_transport.h>
#include <thrift/c_glib/transport/thrift_memory_buffer.h>

#include "rpc/connect.h"
#include "sf_scribe_scribe.h"
#include "sf_thrift_snowflake_types.h"

#define SF_AUDIT_BACKOFF_MIN_MS 100
#define SF_AUDIT_BACKOFF_MAX_MS 5000

G_DEFINE_QUARK(sf-audit-error-quark, sf_audit_error)

/* The ids of one call, queued together: n ids, their n tags, then the agent's bytes. */
typedef struct sf_audit_batch {
    struct sf_audit_batch *next;
    size_t n, bytes;
    const char *agent;
    int64_t *tags;
    int64_t ids[];
} sf_audit_batch;

/* What the queue may hold per entry on average, agent included: a full queue of one-id
 * calls with 255-byte agents fits. */
#define SF_AUDIT_BYTES_PER_ENTRY 320

struct sf_audit {
    sf_audit_options o;
    char *scribe_host, *category, *file;
    GMutex lock;              /* guards the queue, the counters and stopping */
    GCond cond;
    sf_audit_batch *head, *tail;
    size_t head_sent;         /* ids of head already delivered */
    size_t queued, queued_bytes;
    sf_audit_stats stats;    /* the counters; stats.queued unused (see queued) */
    gboolean stopping;
    gint64 stop_timeout_us;   /* how long a stop waits for the sink to take something */
    gint64 stop_deadline_us;  /* monotonic: give up delivering after this */
    GThread *thread;
    /* The sender thread's own: */
    int fd;                   /* the file sink */
    /* The scribe connection: c_glib's transports, protocols and clients do not hold
     * references to what they wrap, so each is kept here and released in order. */
    ThriftSocket *socket;
    ThriftTransport *transport;
    ThriftProtocol *protocol;
    SfScribeScribeIf *client;
    unsigned failing;         /* failed attempts in a row */
};

/* A random 64-bit tag per entry, as the original's, drawn when the entry is made so that
 * a batch sent again carries the same tags (downstream can drop repeats by tag):
 * xorshift64* per thread, seeded from the kernel. */
static int64_t sf_audit_next_tag(void)
{
    static _Thread_local uint64_t rng;
    if (rng == 0 && (getrandom(&rng, sizeof rng, 0) != (ssize_t)sizeof rng || rng == 0))
        rng = (uint64_t)g_get_real_time() | 1;
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (int64_t)(rng * 0x2545F4914F6CDD1DULL);
}

void sf_audit_record(sf_audit *a, const int64_t *ids, size_t n, const char *agent)
{
    if (a == NULL || n == 0)
        return;
    size_t agent_len = strlen(agent);
    size_t bytes = sizeof(sf_audit_batch) + 2 * n * sizeof(int64_t) + agent_len + 1;
    sf_audit_batch *b = g_malloc(bytes);
    b->next = NULL;
    b->n = n;
    b->bytes = bytes;
    memcpy(b->ids, ids, n * sizeof(int64_t));
    b->tags = b->ids + n;
    for (size_t i = 0; i < n; i++)
        b->tags[i] = sf_audit_next_tag();
    char *copy = (char *)(b->tags + n);
    memcpy(copy, agent, agent_len + 1);
    b->agent = copy;
    g_mutex_lock(&a->lock);
    if (a->stopping || a->queued + n > (size_t)a->o.queue_size ||
        a->queued_bytes + bytes > (size_t)a->o.queue_size * SF_AUDIT_BYTES_PER_ENTRY) {
        a->stats.audit_dropped += n;
        g_mutex_unlock(&a->lock);
        g_free(b);
        return;
    }
    a->queued += n;
    a->queued_bytes += bytes;
    if (a->tail != NULL)
        a->tail->next = b;
    else
        a->head = b;
    a->tail = b;
    g_cond_signal(&a->cond);
    g_mutex_unlock(&a->lock);
}

/* Drops the scribe connection; the next attempt connects again. */
static void sf_audit_disconnect(sf_audit *a)
{
    if (a->client != NULL) {
        thrift_transport_close(a->transport, NULL);
        g_object_unref(a->client);
        g_object_unref(a->protocol);
        g_object_unref(a->transport);
        g_object_unref(a->socket);
        a->client = NULL;
        a->protocol = NULL;
        a->transport = NULL;
        a->socket = NULL;
    }
}

/* Connects to scribe when not connected. FALSE with err filled when it cannot. */
static gboolean sf_audit_connect(sf_audit *a, char *err, size_t errlen)
{
    if (a->client != NULL)
        return TRUE;
    char cerr[256];
    ThriftSocket *sock = sf_connect_thrift_socket(a->scribe_host, a->o.scribe_port,
                                                  a->o.socket_timeout_ms, cerr, sizeof cerr);
    if (sock == NULL) {
        g_snprintf(err, errlen, "cannot connect to scribe at %s:%d: %s", a->scribe_host,
                   a->o.scribe_port, cerr);
        return FALSE;
    }
    a->socket = sock;
    a->transport = g_object_new(THRIFT_TYPE_FRAMED_TRANSPORT, "transport", sock, NULL);
    a->protocol = g_object_new(THRIFT_TYPE_BINARY_PROTOCOL, "transport", a->transport, NULL);
    a->client = g_object_new(SF_SCRIBE_TYPE_SCRIBE_CLIENT, "input_protocol", a->protocol,
                             "output_protocol", a->protocol, NULL);
    return TRUE;
}

/* The original's message for one entry: base64 of its binary serialization, then "\n". */
static char *sf_audit_scribe_message(ThriftMemoryBuffer *mb, ThriftProtocol *proto,
                                     SfThriftAuditLogEntry *entry, GError **error)
{
    g_byte_array_set_size(mb->buf, 0);
    if (thrift_struct_write(THRIFT_STRUCT(entry), proto, error) < 0)
        return NULL;
    char *b64 = g_base64_encode(mb->buf->data, mb->buf->len);
    char *msg = g_strconcat(b64, "\n", NULL);
    g_free(b64);
    return msg;
}

/* One Log call with n entries. TRUE when scribe answered OK. */
static gboolean sf_audit_send_scribe(sf_audit *a, const int64_t *ids, const int64_t *tags,
                                     const char **agents, size_t n, size_t *done, char *err,
                                     size_t errlen)
{
    *done = 0;
    if (!sf_audit_connect(a, err, errlen))
        return FALSE;
    size_t longest = 0;
    for (size_t i = 0; i < n; i++)
        longest = MAX(longest, strlen(agents[i]));
    ThriftMemoryBuffer *mb =
        g_object_new(THRIFT_TYPE_MEMORY_BUFFER, "buf_size", (guint)(longest + 64), NULL);
    ThriftProtocol *proto = g_object_new(THRIFT_TYPE_BINARY_PROTOCOL, "transport", mb, NULL);
    SfThriftAuditLogEntry *entry = g_object_new(SF_THRIFT_TYPE_AUDIT_LOG_ENTRY, NULL);
    GPtrArray *messages = g_ptr_array_new_with_free_func(g_object_unref);
    GError *error = NULL;
    gboolean ok = TRUE;
    for (size_t i = 0; i < n && ok; i++) {
        g_object_set(entry, "id", (gint64)ids[i], "useragent", agents[i], "tag",
                     (gint64)tags[i], NULL);
        char *msg = sf_audit_scribe_message(mb, proto, entry, &error);
        if (msg == NULL) {
            g_snprintf(err, errlen, "cannot serialize an audit entry: %s",
                       error ? error->message : "unknown error");
            ok = FALSE;
            break;
        }
        g_ptr_array_add(messages, g_object_new(SF_SCRIBE_TYPE_LOG_ENTRY, "category",
                                               a->category, "message", msg, NULL));
        g_free(msg);
    }
    SfScribeResultCode rc = SF_SCRIBE_RESULT_CODE_TRY_LATER;
    if (ok && !sf_scribe_scribe_if_log(a->client, &rc, messages, &error)) {
        g_snprintf(err, errlen, "Log to scribe at %s:%d failed: %s", a->scribe_host,
                   a->o.scribe_port, error ? error->message : "unknown error");
        sf_audit_disconnect(a);
        ok = FALSE;
    } else if (ok && rc != SF_SCRIBE_RESULT_CODE_OK) {
        g_snprintf(err, errlen, "scribe at %s:%d answered TRY_LATER", a->scribe_host,
                   a->o.scribe_port);
        ok = FALSE;
    }
    if (ok)
        *done = n;
    g_clear_error(&error);
    g_ptr_array_free(messages, TRUE);
    g_object_unref(entry);
    g_object_unref(proto);
    g_object_unref(mb);
    return ok;
}

/* Appends n entries to the file in one write. Agents match the id grammar (letters,
 * digits, '-'), so they need no JSON escaping. TRUE when all of it was written; *done is
 * the number of entries whose whole line reached the file (they are not written again). */
static gboolean sf_audit_send_file(sf_audit *a, const int64_t *ids, const int64_t *tags,
                                   const char **agents, size_t n, size_t *done, char *err,
                                   size_t errlen)
{
    GString *out = g_string_sized_new(n * 64);
    for (size_t i = 0; i < n; i++)
        g_string_append_printf(out, "{\"id\":%" G_GINT64_FORMAT ",\"useragent\":\"%s\","
                               "\"tag\":%" G_GINT64_FORMAT "}\n",
                               (gint64)ids[i], agents[i], (gint64)tags[i]);
    gboolean ok = TRUE;
    gsize off = 0;
    while (off < out->len) {
        ssize_t w = write(a->fd, out->str + off, out->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            /* A partial line may be left; the next write starts on a line of its own. */
            g_snprintf(err, errlen, "cannot append to %s: %s", a->file,
                       w < 0 ? g_strerror(errno) : "nothing written");
            if (off > 0 && write(a->fd, "\n", 1) != 1)
                g_debug("cannot end the partial audit line in %s", a->file);
            ok = FALSE;
            break;
        }
        off += (gsize)w;
    }
    *done = 0;
    for (gsize i = 0; i < off; i++)
        *done += out->str[i] == '\n';
    g_string_free(out, TRUE);
    return ok;
}

/* Copies up to batch_size queued entries, oldest first, without removing them. */
static size_t sf_audit_peek(sf_audit *a, int64_t *ids, int64_t *tags, const char **agents)
{
    size_t n = 0, skip = a->head_sent;
    for (sf_audit_batch *b = a->head; b != NULL && n < (size_t)a->o.batch_size; b = b->next) {
        for (size_t i = skip; i < b->n && n < (size_t)a->o.batch_size; i++, n++) {
            ids[n] = b->ids[i];
            tags[n] = b->tags[i];
            agents[n] = b->agent;
        }
        skip = 0;
    }
    return n;
}

/* Removes the n oldest entries, delivered. */
static void sf_audit_pop(sf_audit *a, size_t n)
{
    a->queued -= n;
    a->stats.audit_sent += n;
    while (n > 0) {
        sf_audit_batch *b = a->head;
        size_t left = b->n - a->head_sent;
        if (n < left) {
            a->head_sent += n;
            return;
        }
        n -= left;
        a->head = b->next;
        if (a->head == NULL)
            a->tail = NULL;
        a->head_sent = 0;
        a->queued_bytes -= b->bytes;
        g_free(b);
    }
}

/* Logs the first failure of a run and then every 100th, and the recovery, so a sink that
 * stays down cannot flood the log. */
static void sf_audit_note_result(sf_audit *a, gboolean ok, const char *err)
{
    if (ok) {
        if (a->failing > 0)
            g_message("audit log delivered again after %u failed attempts", a->failing);
        a->failing = 0;
        return;
    }
    if (a->failing % 100 == 0)
        g_warning("audit log: %s; entries stay queued and are retried (%u failed attempts "
                  "so far)", err, a->failing + 1);
    a->failing++;
}

/* The sender: takes a batch, delivers it, removes it; backs off after a failure. At stop
 * it keeps delivering until the queue is empty or the sink has taken nothing for the stop's
 * timeout: a slow sink gets all of it, a dead one bounds the stop. A stop ends a backoff
 * at once, and a failure during the stop is retried after the shortest backoff, so a sink
 * that is back is tried before the time runs out. */
static gpointer sf_audit_thread(gpointer data)
{
    sf_audit *a = data;
    int64_t *ids = g_new(int64_t, a->o.batch_size);
    int64_t *tags = g_new(int64_t, a->o.batch_size);
    const char **agents = g_new(const char *, a->o.batch_size);
    int backoff_ms = 0;
    g_mutex_lock(&a->lock);
    for (;;) {
        while (a->head == NULL && !a->stopping)
            g_cond_wait(&a->cond, &a->lock);
        if (a->head == NULL || (a->stopping && g_get_monotonic_time() >= a->stop_deadline_us))
            break;
        size_t n = sf_audit_peek(a, ids, tags, agents), done = 0;
        g_mutex_unlock(&a->lock);
        char err[512] = "";
        gboolean ok = a->o.sink == SF_AUDIT_SCRIBE
                          ? sf_audit_send_scribe(a, ids, tags, agents, n, &done, err, sizeof err)
                          : sf_audit_send_file(a, ids, tags, agents, n, &done, err, sizeof err);
        sf_audit_note_result(a, ok, err);
        g_mutex_lock(&a->lock);
        sf_audit_pop(a, done);
        if (a->stopping && done > 0)
            a->stop_deadline_us = g_get_monotonic_time() + a->stop_timeout_us;
        if (ok) {
            backoff_ms = 0;
            continue;
        }
        a->stats.audit_send_failures++;
        /* While stopping, the stop's window bounds the retries, not the backoff: a longer
         * wait than the shortest would let one refusal end the stop undelivered. */
        backoff_ms = a->stopping ? SF_AUDIT_BACKOFF_MIN_MS
                                 : CLAMP(backoff_ms * 2, SF_AUDIT_BACKOFF_MIN_MS,
                                         SF_AUDIT_BACKOFF_MAX_MS);
        gint64 until = g_get_monotonic_time() + (gint64)backoff_ms * 1000;
        gboolean stopping_before = a->stopping;
        if (a->stopping)
            until = MIN(until, a->stop_deadline_us);
        while (a->stopping == stopping_before && g_get_monotonic_time() < until &&
               g_cond_wait_until(&a->cond, &a->lock, until)) {
        }
    }
    g_mutex_unlock(&a->lock);
    g_free(ids);
    g_free(tags);
    g_free(agents);
    sf_audit_disconnect(a);
    return NULL;
}

sf_audit *sf_audit_start(const sf_audit_options *o, GError **error)
{
    if (o->sink == SF_AUDIT_NONE)
        return NULL;
    char why[256];
    if (!sf_audit_options_check(o, why, sizeof why)) {
        g_set_error(error, SF_AUDIT_ERROR, 0, "%s", why);
        return NULL;
    }
    int fd = -1;
    if (o->sink == SF_AUDIT_FILE) {
        fd = open(o->file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
        if (fd < 0) {
            g_set_error(error, SF_AUDIT_ERROR, 0, "[audit] file = %s cannot be opened for "
                        "appending: %s", o->file, g_strerror(errno));
            return NULL;
        }
    }
    sf_audit *a = g_new0(sf_audit, 1);
    a->o = *o;
    a->scribe_host = g_strdup(o->scribe_host);
    a->category = g_strdup(o->category);
    a->file = g_strdup(o->file);
    a->fd = fd;
    g_mutex_init(&a->lock);
    g_cond_init(&a->cond);
    a->thread = g_thread_new("audit", sf_audit_thread, a);
    return a;
}

void sf_audit_get_stats(sf_audit *a, sf_audit_stats *out)
{
    memset(out, 0, sizeof *out);
    if (a == NULL)
        return;
    g_mutex_lock(&a->lock);
    *out = a->stats;
    out->queued = a->queued;
    out->queue_size = (uint64_t)a->o.queue_size;
    g_mutex_unlock(&a->lock);
}

void sf_audit_stop(sf_audit *a, int timeout_ms)
{
    if (a == NULL)
        return;
    g_mutex_lock(&a->lock);
    a->stopping = TRUE;
    a->stop_timeout_us = (gint64)MAX(timeout_ms, 0) * 1000;
    a->stop_deadline_us = g_get_monotonic_time() + a->stop_timeout_us;
    size_t queued = a->queued;
    g_cond_broadcast(&a->cond);
    g_mutex_unlock(&a->lock);
    if (queued > 0)
        g_message("audit log: delivering %zu queued entries before stopping (giving up "
                  "after %d ms in which the sink takes none)", queued, timeout_ms);
    g_thread_join(a->thread);
    if (a->queued > 0) {
        g_warning("audit log: %zu entries not delivered at stop (the sink took nothing for "
                  "%d ms)", a->queued, timeout_ms);
        a->stats.audit_dropped += a->queued;
    }
    while (a->head != NULL) {
        sf_audit_batch *b = a->head;
        a->head = b->next;
        g_free(b);
    }
    if (a->fd >= 0 && close(a->fd) != 0)
        g_warning("audit log: closing %s failed: %s", a->file, g_strerror(errno));
    g_mutex_clear(&a->lock);
    g_cond_clear(&a->cond);
    g_free(a->scribe_host);
    g_free(a->category);
    g_free(a->file);
    g_free(a);
}
