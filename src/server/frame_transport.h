/* frame_transport.h -- SfFrameTransport: a Thrift transport that reads one frame from memory and writes replies into a growable buffer. */
#ifndef SF_FRAME_TRANSPORT_H
#define SF_FRAME_TRANSPORT_H

#include <glib-object.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <thrift/c_glib/processor/thrift_processor.h>
#include <thrift/c_glib/protocol/thrift_protocol.h>
#include <thrift/c_glib/transport/thrift_transport.h>

G_BEGIN_DECLS

#define SF_TYPE_FRAME_TRANSPORT (sf_frame_transport_get_type())
#define SF_FRAME_TRANSPORT(obj) \
    (G_TYPE_CHECK_INSTANCE_CAST((obj), SF_TYPE_FRAME_TRANSPORT, SfFrameTransport))

typedef struct _SfFrameTransport SfFrameTransport;
typedef struct _SfFrameTransportClass SfFrameTransportClass;

GType sf_frame_transport_get_type(void);

/* A transport with an empty input and an empty output buffer. One per thread:
 * it is reused for every frame, so a request allocates no transport. */
SfFrameTransport *sf_frame_transport_new(void);

/* Makes the next reads return data[0..len). The caller keeps data alive and
 * unchanged until the frame is processed. Reading past len is an error. */
void sf_frame_transport_set_input(SfFrameTransport *t, const uint8_t *data, size_t len);

/* Starts a framed reply: reserves its 4-byte length at the end of the output. */
void sf_frame_transport_begin_reply(SfFrameTransport *t);

/* Ends the reply begun last: writes its big-endian length, or drops the
 * header when nothing was written (a oneway call). */
void sf_frame_transport_end_reply(SfFrameTransport *t);

/* Drops the reply begun last, e.g. after the processor failed half-way. */
void sf_frame_transport_cancel_reply(SfFrameTransport *t);

/* Appends n bytes to the output and returns where they go, for a writer that encodes
 * in place; valid until the next write or reset. */
uint8_t *sf_frame_transport_extend(SfFrameTransport *t, size_t n);

/* The output written so far; valid until the next write or reset. */
const uint8_t *sf_frame_transport_output(const SfFrameTransport *t, size_t *len);

/* Empties the output, giving back memory beyond a small reserve. */
void sf_frame_transport_reset_output(SfFrameTransport *t);

#define SF_FRAME_ERROR (sf_frame_error_quark())
GQuark sf_frame_error_quark(void);

typedef enum {
    SF_FRAME_ERROR_LENGTH,    /* a frame length outside 1..max_frame_size */
    SF_FRAME_ERROR_MALFORMED, /* a frame that is not a valid call */
} sf_frame_error_code;

/* Answers one frame's call without the processor when it can: appends the reply's body
 * (without the frame length) to t's output and returns true; returns false, having
 * written nothing, to leave the frame to the processor. */
typedef bool (*sf_frame_direct_fn)(void *ctx, SfFrameTransport *t, const uint8_t *frame,
                                   size_t len);

/* The server's path from bytes to replies: answers the complete frames at
 * the start of buf[0..len) through direct (when not NULL, called with direct_ctx) or
 * else processor (protocol must wrap t), and
 * appends their framed replies to t's output, stopping before a frame once
 * output_room bytes of replies are waiting. Returns the bytes consumed (a
 * trailing partial frame is left for later) and sets *frames to the number
 * answered; returns -1 with *error, naming the problem, when a frame's length
 * is outside 1..max_frame_size or its content is not a valid call. */
ssize_t sf_frame_transport_answer(SfFrameTransport *t, ThriftProtocol *protocol,
                                  ThriftProcessor *processor, sf_frame_direct_fn direct,
                                  void *direct_ctx, const uint8_t *buf, size_t len,
                                  size_t max_frame_size, size_t output_room, size_t *frames,
                                  GError **error);

G_END_DECLS

#endif /* SF_FRAME_TRANSPORT_H */
