/* check_notify.c -- the service manager notifications, received on a datagram socket of
 * the test's own: the messages and their order, READY=1 only once, abstract names, the
 * no-op without NOTIFY_SOCKET, failures reported, and the watchdog interval. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/notify.h"

/* The receiving socket and its directory, per test (each test runs in its own fork). */
static int sock_fd = -1;
static char sock_dir[64];
static char sock_path[128];

/* Binds a datagram socket at name (a path, or "@name" for an abstract one) and points
 * NOTIFY_SOCKET at it. */
static void listen_at(const char *name)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    ck_assert_uint_lt(len, sizeof addr.sun_path);
    memcpy(addr.sun_path, name, len);
    if (name[0] == '@')
        addr.sun_path[0] = '\0';
    sock_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(sock_fd, 0);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    ck_assert_msg(bind(sock_fd, (struct sockaddr *)&addr, alen) == 0, "bind %s: %s", name,
                  strerror(errno));
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", name, 1), 0);
}

/* A socket file in a fresh temporary directory. */
static void listen_on_path(void)
{
    strcpy(sock_dir, "/tmp/sf-notify-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(sock_dir));
    snprintf(sock_path, sizeof sock_path, "%s/notify", sock_dir);
    listen_at(sock_path);
}

/* Removes the socket and its directory. */
static void teardown(void)
{
    if (sock_fd >= 0)
        close(sock_fd);
    sock_fd = -1;
    if (sock_path[0] != '\0')
        unlink(sock_path);
    if (sock_dir[0] != '\0')
        rmdir(sock_dir);
    sock_path[0] = sock_dir[0] = '\0';
    unsetenv("NOTIFY_SOCKET");
}

/* The next datagram as a string, or "" when none arrives within 200 ms. */
static const char *next_message(void)
{
    static char buf[2048];
    struct pollfd p = {.fd = sock_fd, .events = POLLIN};
    if (poll(&p, 1, 200) != 1)
        return "";
    ssize_t n = recv(sock_fd, buf, sizeof buf - 1, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    return buf;
}

START_TEST(messages_arrive_in_order_and_ready_only_once)
{
    listen_on_path();
    ck_assert_int_eq(sf_notify_status("serving as worker id %d", 7), 0);
    ck_assert_int_eq(sf_notify_ready(), 0);
    ck_assert_int_eq(sf_notify_status("fenced: %s", "session expired"), 0);
    ck_assert_int_eq(sf_notify_ready(), 0); /* serving again: no second READY=1 */
    ck_assert_int_eq(sf_notify_watchdog(), 0);
    ck_assert_int_eq(sf_notify_stopping(), 0);
    ck_assert_str_eq(next_message(), "STATUS=serving as worker id 7");
    ck_assert_str_eq(next_message(), "READY=1");
    ck_assert_str_eq(next_message(), "STATUS=fenced: session expired");
    ck_assert_str_eq(next_message(), "WATCHDOG=1");
    ck_assert_str_eq(next_message(), "STOPPING=1");
    ck_assert_str_eq(next_message(), "");
    teardown();
}
END_TEST

START_TEST(abstract_socket_names_work)
{
    char name[64];
    snprintf(name, sizeof name, "@sf-notify-test-%d", (int)getpid());
    listen_at(name);
    ck_assert_int_eq(sf_notify_ready(), 0);
    ck_assert_str_eq(next_message(), "READY=1");
    teardown();
}
END_TEST

START_TEST(a_status_stays_on_one_line)
{
    listen_on_path();
    ck_assert_int_eq(sf_notify_status("fenced: %s", "lost\nREADY=1"), 0);
    ck_assert_str_eq(next_message(), "STATUS=fenced: lost READY=1");
    teardown();
}
END_TEST

START_TEST(nothing_is_sent_without_notify_socket)
{
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(sf_notify_ready(), 0);
    ck_assert_int_eq(sf_notify_status("x"), 0);
    ck_assert_int_eq(sf_notify_stopping(), 0);
    ck_assert_int_eq(sf_notify_watchdog(), 0);
}
END_TEST

START_TEST(unusable_sockets_fail_with_errno)
{
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", "relative/path", 1), 0);
    errno = 0;
    ck_assert_int_eq(sf_notify_stopping(), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", "/nonexistent/sf-notify", 1), 0);
    errno = 0;
    ck_assert_int_eq(sf_notify_watchdog(), -1);
    ck_assert_int_eq(errno, ENOENT);
    unsetenv("NOTIFY_SOCKET");
}
END_TEST

START_TEST(watchdog_interval_applies_to_this_process_only)
{
    char pid[32];
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    ck_assert_uint_eq(sf_notify_watchdog_usec(), 0);
    ck_assert_int_eq(setenv("WATCHDOG_USEC", "20000000", 1), 0);
    ck_assert_uint_eq(sf_notify_watchdog_usec(), 20000000);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    ck_assert_int_eq(setenv("WATCHDOG_PID", pid, 1), 0);
    ck_assert_uint_eq(sf_notify_watchdog_usec(), 20000000);
    snprintf(pid, sizeof pid, "%d", (int)getpid() + 1);
    ck_assert_int_eq(setenv("WATCHDOG_PID", pid, 1), 0);
    ck_assert_uint_eq(sf_notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    ck_assert_int_eq(setenv("WATCHDOG_USEC", "20s", 1), 0);
    ck_assert_uint_eq(sf_notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_USEC");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("protocol");
    /* Each test in a fork of its own: READY=1 is sent once per process. */
    tcase_add_test(tc, messages_arrive_in_order_and_ready_only_once);
    tcase_add_test(tc, abstract_socket_names_work);
    tcase_add_test(tc, a_status_stays_on_one_line);
    tcase_add_test(tc, nothing_is_sent_without_notify_socket);
    tcase_add_test(tc, unusable_sockets_fail_with_errno);
    tcase_add_test(tc, watchdog_interval_applies_to_this_process_only);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
