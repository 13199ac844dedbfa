/* fuzz_frames.c -- fuzz target: arbitrary bytes down the server's path from a
 * client's stream to frames, the direct codec or the Thrift processor, the handler and
 * the replies.
 * Whatever arrives, the path must answer, or refuse with a message; never
 * crash, leak, hang or hand out an id that breaks the layout. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/thrift_application_exception.h>

#include "rpc/bounded_protocol.h"
#include "server/direct_codec.h"
#include "server/frame_transport.h"
#include "server/handler.h"
#include "server/standalone.h"
#include "lib/snowflake.h"
#include "rpc/thrift_fix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The largest max_frame_size allowed (16 MiB), so that what a raised limit lets in,
 * such as deeply nested structs, is fuzzed too. */
#define FUZZ_MAX_FRAME_SIZE 16777216

static SfFrameTransport *fuzz_transport;
static ThriftProtocol *fuzz_protocol;
static ThriftProcessor *fuzz_processor;
static SfHandler *fuzz_handler; /* held by the processor */

/* A handler with the default limits and get_ids' count bounded by max_batch. */
static SfHandler *new_handler(int max_batch)
{
    sf_handler_options o;
    sf_handler_options_init(&o);
    o.max_batch_size = max_batch;
    return sf_handler_new(&o);
}

/* One handler, processor and transport for the whole run, as one server
 * thread keeps them for every connection. */
static void fuzz_frames_init(void)
{
    sf_worker_options o;
    sf_worker_options_init(&o);
    o.worker_id = 3;
    o.datacenter_id = 4;
    sf_worker *w = sf_worker_new(&o, NULL);
    if (w == NULL)
        abort();
    sf_thrift_fix_finalize();
    sf_thrift_fix_processor();
    SfHandler *handler = new_handler(100);
    sf_standalone *standalone = sf_standalone_new_serving(w); /* kept for the whole run */
    if (standalone == NULL)
        abort();
    sf_handler_set_source(handler, sf_standalone_source(standalone));
    fuzz_processor = g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR, "handler", handler, NULL);
    g_object_unref(handler);
    fuzz_handler = handler;
    /* The first unknown method name creates this class for good; made here,
     * it is not mistaken for a leak of the input that happened to need it. */
    g_type_class_ref(THRIFT_TYPE_APPLICATION_EXCEPTION);
    fuzz_transport = sf_frame_transport_new();
    fuzz_protocol = sf_bounded_protocol_new(THRIFT_TRANSPORT(fuzz_transport));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_transport == NULL)
        fuzz_frames_init();
    size_t frames = 0;
    GError *error = NULL;
    ssize_t used = sf_frame_transport_answer(fuzz_transport, fuzz_protocol, fuzz_processor,
                                             sf_direct_answer, fuzz_handler, data, size,
                                             FUZZ_MAX_FRAME_SIZE, 1024 * 1024, &frames, &error);
    if (used < 0 && (error == NULL || error->message[0] == '\0'))
        abort(); /* a refusal must say why */
    if (used > (ssize_t)size)
        abort();
    size_t out_len;
    sf_frame_transport_output(fuzz_transport, &out_len);
    if (frames > 0 && out_len == 0)
        abort(); /* every call gets a reply */
    g_clear_error(&error);
    sf_frame_transport_reset_output(fuzz_transport);
    return 0;
}
