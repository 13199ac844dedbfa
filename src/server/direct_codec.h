/* direct_codec.h -- sf_direct: answers the Snowflake service's five calls straight from a
 * frame's bytes into the reply's, without the c_glib processor's GObjects. */
#ifndef SF_DIRECT_CODEC_H
#define SF_DIRECT_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame_transport.h"
#include "handler.h"

/* Answers frame[0..len) through handler (an SfHandler *) when it is a call to get_id,
 * get_ids, get_worker_id, get_datacenter_id or get_timestamp in the form Thrift clients
 * send it: a strict or non-strict CALL header, the arguments' fields in order with their
 * declared types, nothing after them, and an agent without a NUL byte. Appends the reply's
 * body to t, byte for byte what the generated processor writes for the same call, and
 * returns true. Returns false, having called nothing and written nothing, for any other
 * frame: the processor answers or refuses it. An sf_frame_direct_fn. */
bool sf_direct_answer(void *handler, SfFrameTransport *t, const uint8_t *frame, size_t len);

#endif /* SF_DIRECT_CODEC_H */
