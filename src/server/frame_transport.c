/* frame_transport.c -- SfFrameTransport: a Thrift transport that reads one frame from memory and writes replies into a growable buffer. */
#include "frame_transport.h"

#include <string.h>

/* Output kept between frames; larger buffers are released on reset. */
#define SF_FRAME_OUTPUT_RESERVE (64 * 1024)

struct _SfFrameTransport {
    ThriftTransport parent;
    const uint8_t *in;
    size_t in_len, in_pos;
    uint8_t *out;
    size_t out_len, out_cap;
    size_t reply_start; /* offset of the length header of the open reply */
    uint8_t *strict;    /* a non-strict call rewritten with the strict header */
    size_t strict_cap;
};

struct _SfFrameTransportClass {
    ThriftTransportClass parent;
};

G_DEFINE_TYPE(SfFrameTransport, sf_frame_transport, THRIFT_TYPE_TRANSPORT)

/* Sets the "frame ends early" error every short read reports. */
static void sf_frame_transport_short(GError **error, size_t want, size_t left)
{
    g_set_error(error, THRIFT_TRANSPORT_ERROR, THRIFT_TRANSPORT_ERROR_RECEIVE,
                "frame ends early: %zu more bytes needed, %zu left", want, left);
}

/* Always open: the transport is a view of memory. */
static gboolean sf_frame_transport_is_open(ThriftTransport *transport)
{
    (void)transport;
    return TRUE;
}

/* Nothing to open or close. */
static gboolean sf_frame_transport_noop(ThriftTransport *transport, GError **error)
{
    (void)transport;
    (void)error;
    return TRUE;
}

/* Copies up to len bytes of the frame; an exhausted frame is an error so that
 * a truncated request can never make the protocol loop. */
static gint32 sf_frame_transport_read(ThriftTransport *transport, gpointer buf, guint32 len,
                                      GError **error)
{
    SfFrameTransport *t = (SfFrameTransport *)transport;
    size_t left = t->in_len - t->in_pos;
    if (left == 0 && len > 0) {
        sf_frame_transport_short(error, len, left);
        return -1;
    }
    size_t n = len < left ? len : left;
    memcpy(buf, t->in + t->in_pos, n);
    t->in_pos += n;
    return (gint32)n;
}

/* Reads exactly len bytes or fails without consuming any. */
static gint32 sf_frame_transport_read_all(ThriftTransport *transport, gpointer buf, guint32 len,
                                          GError **error)
{
    SfFrameTransport *t = (SfFrameTransport *)transport;
    size_t left = t->in_len - t->in_pos;
    if (len > left) {
        sf_frame_transport_short(error, len, left);
        return -1;
    }
    memcpy(buf, t->in + t->in_pos, len);
    t->in_pos += len;
    return (gint32)len;
}

/* Grows the output to hold extra more bytes. */
static void sf_frame_transport_reserve(SfFrameTransport *t, size_t extra)
{
    if (t->out_len + extra <= t->out_cap)
        return;
    size_t cap = t->out_cap ? t->out_cap : 256;
    while (cap < t->out_len + extra)
        cap *= 2;
    t->out = g_realloc(t->out, cap);
    t->out_cap = cap;
}

/* Appends to the output buffer; never fails (GLib aborts on no memory). */
static gboolean sf_frame_transport_write(ThriftTransport *transport, const gpointer buf,
                                         const guint32 len, GError **error)
{
    (void)error;
    SfFrameTransport *t = (SfFrameTransport *)transport;
    sf_frame_transport_reserve(t, len);
    memcpy(t->out + t->out_len, buf, len);
    t->out_len += len;
    return TRUE;
}

/* Refuses containers and strings longer than what is left of the frame
 * before the protocol allocates for them. */
static gboolean sf_frame_transport_check_read(ThriftTransport *transport, glong num_bytes,
                                              GError **error)
{
    SfFrameTransport *t = (SfFrameTransport *)transport;
    size_t left = t->in_len - t->in_pos;
    if (num_bytes < 0 || (size_t)num_bytes > left) {
        sf_frame_transport_short(error, num_bytes < 0 ? 0 : (size_t)num_bytes, left);
        return FALSE;
    }
    return TRUE;
}

/* The frame bounds every message, so size bookkeeping has nothing to do. */
static gboolean sf_frame_transport_size_noop(ThriftTransport *transport, glong size,
                                             GError **error)
{
    (void)transport;
    (void)size;
    (void)error;
    return TRUE;
}

SfFrameTransport *sf_frame_transport_new(void)
{
    return g_object_new(SF_TYPE_FRAME_TRANSPORT, NULL);
}

void sf_frame_transport_set_input(SfFrameTransport *t, const uint8_t *data, size_t len)
{
    t->in = data;
    t->in_len = len;
    t->in_pos = 0;
}

void sf_frame_transport_begin_reply(SfFrameTransport *t)
{
    sf_frame_transport_reserve(t, 4);
    t->reply_start = t->out_len;
    memset(t->out + t->out_len, 0, 4);
    t->out_len += 4;
}

void sf_frame_transport_end_reply(SfFrameTransport *t)
{
    size_t body = t->out_len - t->reply_start - 4;
    if (body == 0) {
        t->out_len = t->reply_start;
        return;
    }
    uint8_t *p = t->out + t->reply_start;
    p[0] = (uint8_t)(body >> 24);
    p[1] = (uint8_t)(body >> 16);
    p[2] = (uint8_t)(body >> 8);
    p[3] = (uint8_t)body;
}

void sf_frame_transport_cancel_reply(SfFrameTransport *t)
{
    t->out_len = t->reply_start;
}

uint8_t *sf_frame_transport_extend(SfFrameTransport *t, size_t n)
{
    sf_frame_transport_reserve(t, n);
    uint8_t *at = t->out + t->out_len;
    t->out_len += n;
    return at;
}

const uint8_t *sf_frame_transport_output(const SfFrameTransport *t, size_t *len)
{
    *len = t->out_len;
    return t->out;
}

void sf_frame_transport_reset_output(SfFrameTransport *t)
{
    t->out_len = 0;
    t->reply_start = 0;
    if (t->out_cap > SF_FRAME_OUTPUT_RESERVE) {
        g_free(t->out);
        t->out = NULL;
        t->out_cap = 0;
    }
}

/* Releases the output buffer. */
static void sf_frame_transport_finalize(GObject *object)
{
    SfFrameTransport *t = SF_FRAME_TRANSPORT(object);
    g_free(t->out);
    g_free(t->strict);
    G_OBJECT_CLASS(sf_frame_transport_parent_class)->finalize(object);
}

/* Starts with no input and no output buffer. */
static void sf_frame_transport_init(SfFrameTransport *t)
{
    t->in = NULL;
    t->in_len = t->in_pos = 0;
    t->out = NULL;
    t->out_len = t->out_cap = t->reply_start = 0;
    t->strict = NULL;
    t->strict_cap = 0;
}

/* Implements every virtual method, including the message-size checks. */
static void sf_frame_transport_class_init(SfFrameTransportClass *klass)
{
    ThriftTransportClass *tc = THRIFT_TRANSPORT_CLASS(klass);
    G_OBJECT_CLASS(klass)->finalize = sf_frame_transport_finalize;
    tc->is_open = sf_frame_transport_is_open;
    tc->peek = sf_frame_transport_noop;
    tc->open = sf_frame_transport_noop;
    tc->close = sf_frame_transport_noop;
    tc->read = sf_frame_transport_read;
    tc->read_all = sf_frame_transport_read_all;
    tc->read_end = sf_frame_transport_noop;
    tc->write = sf_frame_transport_write;
    tc->write_end = sf_frame_transport_noop;
    tc->flush = sf_frame_transport_noop;
    tc->checkReadBytesAvailable = sf_frame_transport_check_read;
    tc->updateKnownMessageSize = sf_frame_transport_size_noop;
    tc->resetConsumedMessageSize = sf_frame_transport_size_noop;
    tc->countConsumedMessageBytes = sf_frame_transport_size_noop;
}

G_DEFINE_QUARK(sf-frame-error-quark, sf_frame_error)

/* The binary protocol's old, non-strict message header has no version word: the name's
 * length (an i32 >= 0), the name, the type as one byte, the seqid. The original server
 * read it (Thrift's strictRead was off), but the c_glib library reads only the strict
 * form, so such a call is rewritten here with the strict header: the version word and
 * type first, then the same name and seqid and the rest of the frame unchanged. The reply
 * is strict, as the original's was; a non-strict client reads both forms. Returns the
 * rewritten frame (valid until the next call) and its length, or NULL with *error when
 * the header does not fit the frame. */
static const uint8_t *sf_frame_transport_make_strict(SfFrameTransport *t, const uint8_t *frame,
                                                     size_t len, size_t *strict_len,
                                                     GError **error)
{
    uint32_t name_len = (uint32_t)frame[0] << 24 | (uint32_t)frame[1] << 16 |
                        (uint32_t)frame[2] << 8 | (uint32_t)frame[3];
    if ((size_t)name_len > len - 4 || len - 4 - name_len < 5) {
        g_set_error(error, SF_FRAME_ERROR, SF_FRAME_ERROR_MALFORMED,
                    "malformed frame of %zu bytes: a non-strict message header with a name of "
                    "%" G_GUINT32_FORMAT " bytes does not fit in it", len, name_len);
        return NULL;
    }
    size_t type_at = 4 + (size_t)name_len;
    *strict_len = len + 3;
    if (t->strict_cap < *strict_len) {
        g_free(t->strict);
        t->strict = g_malloc(*strict_len);
        t->strict_cap = *strict_len;
    }
    uint8_t *out = t->strict;
    out[0] = 0x80;
    out[1] = 0x01;
    out[2] = 0x00;
    out[3] = frame[type_at];
    memcpy(out + 4, frame, type_at);
    memcpy(out + 4 + type_at, frame + type_at + 1, len - type_at - 1);
    return out;
}

/* Gives back a rewritten frame's buffer when it grew past the output's reserve. */
static void sf_frame_transport_trim_strict(SfFrameTransport *t)
{
    if (t->strict_cap > SF_FRAME_OUTPUT_RESERVE) {
        g_free(t->strict);
        t->strict = NULL;
        t->strict_cap = 0;
    }
}

/* Answers one frame, directly or through the processor, appending its framed reply.
 * FALSE with *error when the frame is not a valid call. */
static gboolean sf_frame_transport_answer_one(SfFrameTransport *t, ThriftProtocol *protocol,
                                              ThriftProcessor *processor,
                                              sf_frame_direct_fn direct, void *direct_ctx,
                                              const uint8_t *frame, size_t len, GError **error)
{
    /* A strict binary-protocol header is checked here, so that garbage is
     * reported in the caller's one log line rather than by the library too. */
    if (len >= 4 && (frame[0] & 0x80) && (frame[0] != 0x80 || frame[1] != 0x01)) {
        g_set_error(error, SF_FRAME_ERROR, SF_FRAME_ERROR_MALFORMED,
                    "malformed frame of %zu bytes: not a binary-protocol message (header "
                    "%02x%02x%02x%02x, expected 8001....)",
                    len, frame[0], frame[1], frame[2], frame[3]);
        return FALSE;
    }
    if (direct != NULL) {
        sf_frame_transport_begin_reply(t);
        if (direct(direct_ctx, t, frame, len)) {
            sf_frame_transport_end_reply(t);
            return TRUE;
        }
        sf_frame_transport_cancel_reply(t);
    }
    if (len >= 4 && !(frame[0] & 0x80)) {
        frame = sf_frame_transport_make_strict(t, frame, len, &len, error);
        if (frame == NULL)
            return FALSE;
    }
    sf_frame_transport_set_input(t, frame, len);
    sf_frame_transport_begin_reply(t);
    GError *local = NULL;
    gboolean processed = thrift_processor_process(processor, protocol, protocol, &local);
    sf_frame_transport_trim_strict(t);
    if (!processed) {
        sf_frame_transport_cancel_reply(t);
        g_set_error(error, SF_FRAME_ERROR, SF_FRAME_ERROR_MALFORMED,
                    "malformed frame of %zu bytes: %s", len,
                    local != NULL ? local->message : "the processor failed");
        g_clear_error(&local);
        return FALSE;
    }
    sf_frame_transport_end_reply(t);
    return TRUE;
}

ssize_t sf_frame_transport_answer(SfFrameTransport *t, ThriftProtocol *protocol,
                                  ThriftProcessor *processor, sf_frame_direct_fn direct,
                                  void *direct_ctx, const uint8_t *buf, size_t len,
                                  size_t max_frame_size, size_t output_room, size_t *frames,
                                  GError **error)
{
    size_t pos = 0;
    *frames = 0;
    while (len - pos >= 4 && t->out_len < output_room) {
        int64_t flen = (int32_t)((uint32_t)buf[pos] << 24 | (uint32_t)buf[pos + 1] << 16 |
                                 (uint32_t)buf[pos + 2] << 8 | (uint32_t)buf[pos + 3]);
        if (flen <= 0 || (uint64_t)flen > max_frame_size) {
            g_set_error(error, SF_FRAME_ERROR, SF_FRAME_ERROR_LENGTH,
                        "frame length %" G_GINT64_FORMAT " is outside 1..%zu (max_frame_size)",
                        flen, max_frame_size);
            return -1;
        }
        if (len - pos - 4 < (size_t)flen)
            break;
        if (!sf_frame_transport_answer_one(t, protocol, processor, direct, direct_ctx,
                                           buf + pos + 4, (size_t)flen, error))
            return -1;
        (*frames)++;
        pos += 4 + (size_t)flen;
    }
    return (ssize_t)pos;
}
