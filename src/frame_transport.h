/* frame_transport.h -- SfFrameTransport: a Thrift transport that reads one frame from memory and writes replies into a growable buffer. */
#ifndef SF_FRAME_TRANSPORT_H
#define SF_FRAME_TRANSPORT_H

#include <glib-object.h>
#include <stddef.h>
#include <stdint.h>
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

/* Bytes of the current input not read yet. */
size_t sf_frame_transport_input_left(const SfFrameTransport *t);

/* Starts a framed reply: reserves its 4-byte length at the end of the output. */
void sf_frame_transport_begin_reply(SfFrameTransport *t);

/* Ends the reply begun last: writes its big-endian length, or drops the
 * header when nothing was written (a oneway call). */
void sf_frame_transport_end_reply(SfFrameTransport *t);

/* Drops the reply begun last, e.g. after the processor failed half-way. */
void sf_frame_transport_cancel_reply(SfFrameTransport *t);

/* The output written so far; valid until the next write or reset. */
const uint8_t *sf_frame_transport_output(const SfFrameTransport *t, size_t *len);

/* Empties the output, giving back memory beyond a small reserve. */
void sf_frame_transport_reset_output(SfFrameTransport *t);

G_END_DECLS

#endif /* SF_FRAME_TRANSPORT_H */
