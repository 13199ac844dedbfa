/* check_frame_transport.c -- the server's path from bytes to replies, without sockets: the
 * in-memory transport (reads bounded by the frame, replies framed with their length) and
 * sf_frame_transport_answer over the real processor and handler: whole frames answered,
 * a trailing partial frame left, lengths outside 1..max_frame_size and malformed calls
 * refused, the output room respected; the direct codec answering the calls it knows and
 * leaving the rest to the processor. */
#include <check.h>
#include <string.h>
#include <thrift/c_glib/thrift_application_exception.h>

#include "rpc/bounded_protocol.h"
#include "server/direct_codec.h"
#include "server/frame_transport.h"
#include "hand_frames.h"
#include "server/handler.h"
#include "server/standalone.h"
#include "sf_thrift_snowflake.h"
#include "lib/snowflake.h"
#include "rpc/thrift_fix.h"

static SfFrameTransport *t;

static void setup(void)
{
    t = sf_frame_transport_new();
}

static void teardown(void)
{
    g_object_unref(t);
}

START_TEST(reads_stop_at_the_end_of_the_frame)
{
    const uint8_t data[] = {1, 2, 3};
    uint8_t buf[8];
    GError *error = NULL;
    sf_frame_transport_set_input(t, data, sizeof data);
    ck_assert_int_eq(thrift_transport_read(THRIFT_TRANSPORT(t), buf, 2, &error), 2);
    ck_assert_int_eq(buf[0], 1);
    ck_assert_int_eq(thrift_transport_read(THRIFT_TRANSPORT(t), buf, 8, &error), 1);
    ck_assert_int_eq(buf[0], 3);
    ck_assert_int_eq(thrift_transport_read(THRIFT_TRANSPORT(t), buf, 1, &error), -1);
    ck_assert_msg(error != NULL && strstr(error->message, "frame ends early") != NULL, "%s",
                  error ? error->message : "no error");
    g_clear_error(&error);
}
END_TEST

START_TEST(replies_carry_their_length)
{
    GError *error = NULL;
    size_t len;
    sf_frame_transport_begin_reply(t);
    ck_assert(thrift_transport_write(THRIFT_TRANSPORT(t), "abc", 3, &error));
    sf_frame_transport_end_reply(t);
    const uint8_t *out = sf_frame_transport_output(t, &len);
    const uint8_t want[] = {0, 0, 0, 3, 'a', 'b', 'c'};
    ck_assert_uint_eq(len, sizeof want);
    ck_assert_mem_eq(out, want, sizeof want);
    /* A reply with nothing written (a oneway call) leaves no header; a cancelled one
     * leaves nothing either. */
    sf_frame_transport_begin_reply(t);
    sf_frame_transport_end_reply(t);
    sf_frame_transport_begin_reply(t);
    ck_assert(thrift_transport_write(THRIFT_TRANSPORT(t), "zz", 2, &error));
    sf_frame_transport_cancel_reply(t);
    sf_frame_transport_output(t, &len);
    ck_assert_uint_eq(len, sizeof want);
    sf_frame_transport_reset_output(t);
    sf_frame_transport_output(t, &len);
    ck_assert_uint_eq(len, 0);
}
END_TEST

/* The processor over a handler serving worker 9 of datacenter 4, and a protocol over t. */
static ThriftProcessor *processor;
static ThriftProtocol *protocol;
static SfHandler *handler;
static sf_standalone *standalone;

static void setup_service(void)
{
    setup();
    sf_handler_options ho;
    sf_handler_options_init(&ho);
    handler = sf_handler_new(&ho);
    sf_worker_options wo;
    sf_worker_options_init(&wo);
    wo.worker_id = 9;
    wo.datacenter_id = 4;
    sf_error err;
    sf_worker *w = sf_worker_new(&wo, &err);
    ck_assert_msg(w != NULL, "%s", err.message);
    standalone = sf_standalone_new_serving(w);
    ck_assert_ptr_nonnull(standalone);
    sf_handler_set_source(handler, sf_standalone_source(standalone));
    processor = g_object_new(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR, "handler", handler, NULL);
    protocol = sf_bounded_protocol_new(THRIFT_TRANSPORT(t));
}

static void teardown_service(void)
{
    g_object_unref(protocol);
    g_object_unref(processor);
    g_object_unref(handler);
    sf_standalone_free(standalone);
    teardown();
}

START_TEST(whole_frames_answered_partial_frame_left)
{
    GByteArray *wire = g_byte_array_new();
    hand_append_call(wire, "get_worker_id", 1, NULL, 0);
    hand_append_call(wire, "get_datacenter_id", 2, NULL, 0);
    guint whole = wire->len;
    hand_append_call(wire, "get_timestamp", 3, NULL, 0);
    size_t frames = 0;
    GError *error = NULL;
    ssize_t used = sf_frame_transport_answer(t, protocol, processor, NULL, NULL, wire->data,
                                             wire->len - 3, 65536, 1 << 20, &frames, &error);
    ck_assert_msg(used >= 0, "%s", error ? error->message : "");
    ck_assert_int_eq(used, whole);
    ck_assert_uint_eq(frames, 2);
    size_t len;
    const uint8_t *out = sf_frame_transport_output(t, &len);
    /* Two framed replies: a REPLY header (0x80010002) each, with the asked sequence ids,
     * and the values 9 and 4 as the last 4 bytes before the struct's stop. */
    uint32_t first = hand_get32(out);
    ck_assert_uint_eq(hand_get32(out + 4), 0x80010002u);
    ck_assert_uint_eq(hand_get32(out + 4 + 4 + 4 + strlen("get_worker_id")), 1);
    ck_assert_uint_eq(hand_get32(out + 4 + first - 5), 9);
    const uint8_t *second = out + 4 + first;
    ck_assert_uint_eq(hand_get32(second + 4), 0x80010002u);
    ck_assert_uint_eq(hand_get32(second + 4 + hand_get32(second) - 5), 4);
    ck_assert_uint_eq(len, 4 + first + 4 + hand_get32(second));
    g_byte_array_free(wire, TRUE);
}
END_TEST

START_TEST(lengths_outside_the_limit_refused)
{
    const uint8_t empty[] = {0, 0, 0, 0, 1};
    const uint8_t huge[] = {0, 1, 0, 1, 0};
    size_t frames = 0;
    GError *error = NULL;
    ck_assert_int_eq(sf_frame_transport_answer(t, protocol, processor, NULL, NULL, empty,
                                               sizeof empty, 64, 1 << 20, &frames, &error),
                     -1);
    ck_assert(g_error_matches(error, SF_FRAME_ERROR, SF_FRAME_ERROR_LENGTH));
    g_clear_error(&error);
    ck_assert_int_eq(sf_frame_transport_answer(t, protocol, processor, NULL, NULL, huge,
                                               sizeof huge, 64, 1 << 20, &frames, &error),
                     -1);
    ck_assert(g_error_matches(error, SF_FRAME_ERROR, SF_FRAME_ERROR_LENGTH));
    ck_assert_msg(strstr(error->message, "65537") != NULL, "%s", error->message);
    g_clear_error(&error);
}
END_TEST

START_TEST(malformed_call_refused)
{
    /* A frame whose header says REPLY, not CALL. */
    const uint8_t frame[] = {0, 0, 0, 13, 0x80, 0x01, 0x00, 0x02, 0, 0, 0, 1, 'x', 0, 0, 0, 1};
    size_t frames = 0;
    GError *error = NULL;
    ck_assert_int_eq(sf_frame_transport_answer(t, protocol, processor, NULL, NULL, frame,
                                               sizeof frame, 65536, 1 << 20, &frames, &error),
                     -1);
    ck_assert(g_error_matches(error, SF_FRAME_ERROR, SF_FRAME_ERROR_MALFORMED));
    g_clear_error(&error);
}
END_TEST

START_TEST(output_room_stops_before_a_frame)
{
    GByteArray *wire = g_byte_array_new();
    for (int i = 0; i < 10; i++)
        hand_append_call(wire, "get_worker_id", i, NULL, 0);
    size_t frames = 0;
    GError *error = NULL;
    /* Room for about one reply: the rest waits for the replies to leave. */
    ssize_t used = sf_frame_transport_answer(t, protocol, processor, NULL, NULL, wire->data,
                                             wire->len, 65536, 1, &frames, &error);
    ck_assert_msg(used > 0, "%s", error ? error->message : "");
    ck_assert_uint_lt(frames, 10);
    ck_assert_uint_ge(frames, 1);
    ck_assert_int_lt(used, wire->len);
    g_byte_array_free(wire, TRUE);
}
END_TEST

/* The direct codec answers through its own handler (here another one, serving worker 21),
 * so each reply shows which path made it: the five calls directly, an unknown method, or
 * a call in a shape the codec does not take (extra field), through the processor. */
START_TEST(direct_answers_known_calls_processor_the_rest)
{
    sf_handler_options ho;
    sf_handler_options_init(&ho);
    SfHandler *direct_handler = sf_handler_new(&ho);
    sf_worker_options wo;
    sf_worker_options_init(&wo);
    wo.worker_id = 21;
    sf_worker *w = sf_worker_new(&wo, NULL);
    ck_assert_ptr_nonnull(w);
    sf_standalone *direct_standalone = sf_standalone_new_serving(w);
    ck_assert_ptr_nonnull(direct_standalone);
    sf_handler_set_source(direct_handler, sf_standalone_source(direct_standalone));
    GByteArray *wire = g_byte_array_new();
    hand_append_call(wire, "get_worker_id", 1, NULL, 0);
    const uint8_t extra[] = {8, 0, 7, 0, 0, 0, 1}; /* 7: i32 1, which no method declares */
    hand_append_call(wire, "get_worker_id", 2, extra, sizeof extra);
    hand_append_call(wire, "get_worker_idz", 3, NULL, 0);
    size_t frames = 0;
    GError *error = NULL;
    ssize_t used = sf_frame_transport_answer(t, protocol, processor, sf_direct_answer,
                                             direct_handler, wire->data, wire->len, 65536,
                                             1 << 20, &frames, &error);
    ck_assert_msg(used == (ssize_t)wire->len, "%s", error ? error->message : "");
    ck_assert_uint_eq(frames, 3);
    size_t len;
    const uint8_t *out = sf_frame_transport_output(t, &len);
    uint32_t first = hand_get32(out);
    ck_assert_uint_eq(hand_get32(out + 4 + first - 5), 21); /* the direct path */
    const uint8_t *second = out + 4 + first;
    uint32_t second_len = hand_get32(second);
    ck_assert_uint_eq(hand_get32(second + 4 + second_len - 5), 9); /* the processor */
    const uint8_t *third = second + 4 + second_len;
    ck_assert_uint_eq(hand_get32(third + 4), 0x80010003u); /* T_EXCEPTION: unknown method */
    ck_assert_uint_eq(len, (size_t)(third + 4 + hand_get32(third) - out));
    g_byte_array_free(wire, TRUE);
    g_object_unref(direct_handler);
    sf_standalone_free(direct_standalone);
}
END_TEST

int main(void)
{
    sf_thrift_fix_finalize();
    sf_thrift_fix_processor();
    Suite *s = suite_create("frame_transport");
    TCase *mem = tcase_create("memory");
    tcase_add_checked_fixture(mem, setup, teardown);
    tcase_add_test(mem, reads_stop_at_the_end_of_the_frame);
    tcase_add_test(mem, replies_carry_their_length);
    suite_add_tcase(s, mem);
    TCase *svc = tcase_create("answer");
    tcase_add_checked_fixture(svc, setup_service, teardown_service);
    tcase_add_test(svc, whole_frames_answered_partial_frame_left);
    tcase_add_test(svc, lengths_outside_the_limit_refused);
    tcase_add_test(svc, malformed_call_refused);
    tcase_add_test(svc, output_room_stops_before_a_frame);
    tcase_add_test(svc, direct_answers_known_calls_processor_the_rest);
    suite_add_tcase(s, svc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
