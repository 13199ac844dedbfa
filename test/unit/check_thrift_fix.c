/* check_thrift_fix.c -- the run-time mends of Thrift 0.17's c_glib code: a struct's
 * finalize then chains up to GObject's (which frees the instance's data), also for a
 * subclass that inherits the mended finalize; a framed transport's flush fails when its
 * write did. */
#include <arpa/inet.h>
#include <check.h>
#include <glib-object.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <thrift/c_glib/transport/thrift_framed_transport.h>
#include <thrift/c_glib/transport/thrift_memory_buffer.h>
#include <thrift/c_glib/transport/thrift_socket.h>
#include <unistd.h>

#include "sf_scribe_scribe_types.h"
#include "sf_thrift_snowflake_types.h"
#include "rpc/thrift_fix.h"

/* A subclass of a generated struct without a finalize of its own, as a user of the
 * generated code might derive one. */
typedef struct { SfThriftAuditLogEntry parent; } TestEntry;
typedef struct { SfThriftAuditLogEntryClass parent; } TestEntryClass;
G_DEFINE_TYPE(TestEntry, test_entry, SF_THRIFT_TYPE_AUDIT_LOG_ENTRY)
static void test_entry_class_init(TestEntryClass *klass) { (void)klass; }
static void test_entry_init(TestEntry *self) { (void)self; }

/* Counts data destroyed by GObject's own finalize, which runs only when chained to. */
static int freed;
static void count_freed(gpointer data)
{
    g_free(data);
    freed++;
}

/* Creates an instance of type with data attached, drops it, and says whether GObject's
 * finalize freed the data. */
static gboolean data_freed_on_finalize(GType type)
{
    freed = 0;
    GObject *o = g_object_new(type, NULL);
    g_object_set_data_full(o, "probe", g_strdup("x"), count_freed);
    g_object_unref(o);
    return freed == 1;
}

START_TEST(test_structs_chain_up)
{
    ck_assert_msg(data_freed_on_finalize(SF_THRIFT_TYPE_AUDIT_LOG_ENTRY),
                  "the generated struct's finalize does not reach GObject's");
    ck_assert_msg(data_freed_on_finalize(SF_SCRIBE_TYPE_LOG_ENTRY),
                  "the scribe struct's finalize does not reach GObject's");
    ck_assert_msg(data_freed_on_finalize(THRIFT_TYPE_MEMORY_BUFFER),
                  "the memory buffer's finalize does not reach GObject's");
    ck_assert_msg(data_freed_on_finalize(THRIFT_TYPE_SOCKET),
                  "the socket's finalize does not reach GObject's");
}
END_TEST

START_TEST(test_subclass_inherits_the_mend)
{
    /* Criticals abort the test: finding no saved finalize for the subclass is one. */
    g_log_set_always_fatal(G_LOG_LEVEL_CRITICAL);
    ck_assert_msg(data_freed_on_finalize(test_entry_get_type()),
                  "a subclass of a mended struct does not finalize through it");
}
END_TEST

/* A framed transport whose peer reset the connection: the flush's write fails. The
 * library's flush ignores that and returns TRUE with the error set, so a client goes on
 * to read and sets a second error over the first (GLib warns, and the call's error names
 * the read). */
START_TEST(test_framed_flush_fails_with_its_write)
{
    ck_assert(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    ck_assert(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 1) == 0 &&
              getsockname(lfd, (struct sockaddr *)&a, &alen) == 0);
    ThriftSocket *sock = g_object_new(THRIFT_TYPE_SOCKET, "hostname", "127.0.0.1", "port",
                                      (guint)ntohs(a.sin_port), NULL);
    ThriftTransport *framed =
        g_object_new(THRIFT_TYPE_FRAMED_TRANSPORT, "transport", THRIFT_TRANSPORT(sock), NULL);
    GError *error = NULL;
    ck_assert_msg(thrift_transport_open(framed, &error), "%s", error ? error->message : "");
    int afd = accept(lfd, NULL, NULL);
    ck_assert(afd >= 0);
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    ck_assert(setsockopt(afd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset) == 0);
    close(afd); /* a reset, not a FIN: the next send fails */
    g_usleep(100000);
    ck_assert(thrift_transport_write(framed, "ping", 4, &error)); /* buffered */
    gboolean flushed = thrift_transport_flush(framed, &error);
    ck_assert_msg(error != NULL, "the write to a reset connection did not fail");
    ck_assert_msg(!flushed, "flush returned TRUE although its write failed: %s", error->message);
    g_clear_error(&error);
    thrift_transport_close(framed, NULL);
    g_object_unref(framed);
    g_object_unref(sock);
    close(lfd);
}
END_TEST

int main(void)
{
    sf_thrift_fix_finalize();
    sf_thrift_fix_transport();
    Suite *s = suite_create("thrift_fix");
    TCase *tc = tcase_create("finalize");
    tcase_add_test(tc, test_structs_chain_up);
    tcase_add_test(tc, test_subclass_inherits_the_mend);
    suite_add_tcase(s, tc);
    TCase *transport = tcase_create("transport");
    tcase_add_test(transport, test_framed_flush_fails_with_its_write);
    suite_add_tcase(s, transport);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
