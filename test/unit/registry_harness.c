/* registry_harness.c -- what the registry's suites share (see registry_harness.h). */
#define _GNU_SOURCE /* CLOCK_BOOTTIME */
#include "registry_harness.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/snowflake.h"

zhandle_t *sf_test_zk_client(const char *hosts)
{
    zhandle_t *zh = zookeeper_init(hosts, NULL, 4000, NULL, NULL, 0);
    ck_assert_ptr_nonnull(zh);
    for (int i = 0; i < 1200 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++) /* 60 s */
        sf_test_sleep_ms(50);
    ck_assert_int_eq(zoo_state(zh), ZOO_CONNECTED_STATE);
    return zh;
}

int sf_test_zk_get(zhandle_t *zh, const char *path, char *buf, int len, struct Stat *st)
{
    int n = len - 1;
    int rc = zoo_get(zh, path, 0, buf, &n, st);
    buf[rc == ZOK && n > 0 ? n : 0] = '\0';
    return rc;
}

int64_t sf_test_zk_get_floor(zhandle_t *zh, const char *path)
{
    char data[64];
    if (sf_test_zk_get(zh, path, data, sizeof data, NULL) != ZOK)
        return -1;
    const char *num = strchr(data, ' ');
    return strtoll(num ? num + 1 : data, NULL, 10);
}

bool sf_test_wait_gone(zhandle_t *zh, const char *path, int ms)
{
    for (int i = 0; i < ms / 20; i++) {
        if (zoo_exists(zh, path, 0, NULL) == ZNONODE)
            return true;
        sf_test_sleep_ms(20);
    }
    return false;
}

void sf_test_sleep_ms(int64_t ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

int64_t sf_test_boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sf_test_on_state(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                      int64_t valid_until_boot_ms, int64_t reserved_until_ms, const char *reason)
{
    (void)reserved_until_ms;
    (void)worker_id;
    (void)floor_ms;
    (void)valid_until_boot_ms;
    sf_test_state_log *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->serving = serving;
    snprintf(s->reason, sizeof s->reason, "%s", reason ? reason : "");
    if (serving)
        s->serving_reports++;
    else
        s->fenced_reports++;
    pthread_mutex_unlock(&s->mu);
}

bool sf_test_wait_serving(sf_test_state_log *s, bool want, int ms)
{
    for (int i = 0; i < ms / 50; i++) {
        pthread_mutex_lock(&s->mu);
        bool now = s->serving;
        pthread_mutex_unlock(&s->mu);
        if (now == want)
            return true;
        sf_test_sleep_ms(50);
    }
    return false;
}

void sf_test_on_lease(void *ctx, int64_t valid_until_boot_ms, int64_t reserved_until_ms)
{
    sf_test_lease_log *l = ctx;
    int64_t now = sf_test_boot_ms(), wall = sf_clock_now_ms();
    pthread_mutex_lock(&l->mu);
    l->renewals++;
    l->until = valid_until_boot_ms;
    l->reported_at = now;
    if (valid_until_boot_ms - now > l->longest)
        l->longest = valid_until_boot_ms - now;
    if (wall + valid_until_boot_ms - now > l->wall_until)
        l->wall_until = wall + valid_until_boot_ms - now;
    if (reserved_until_ms > l->reserved_until)
        l->reserved_until = reserved_until_ms;
    pthread_mutex_unlock(&l->mu);
}

void sf_test_on_state_lease(void *ctx, bool serving, int64_t worker_id, int64_t floor_ms,
                            int64_t valid_until_boot_ms, int64_t reserved_until_ms,
                            const char *reason)
{
    (void)reserved_until_ms;
    (void)worker_id;
    (void)floor_ms;
    (void)reason;
    sf_test_lease_log *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (serving && !l->serving && l->renewals_at_serving < 0) {
        l->renewals_at_serving = l->renewals;
        l->serving_until = valid_until_boot_ms;
        l->serving_at = sf_test_boot_ms();
    }
    l->serving = serving;
    pthread_mutex_unlock(&l->mu);
}

sf_test_lease_log sf_test_lease_snapshot(sf_test_lease_log *l)
{
    pthread_mutex_lock(&l->mu);
    sf_test_lease_log copy = *l;
    pthread_mutex_unlock(&l->mu);
    return copy;
}

void sf_test_count_messages(void *ctx, const char *level, const char *message)
{
    sf_test_message_log *m = ctx;
    fprintf(stderr, "registry: %s: %s\n", level, message);
    pthread_mutex_lock(&m->mu);
    if (strcmp(level, "info") != 0 && strstr(message, m->needle))
        m->matching++;
    pthread_mutex_unlock(&m->mu);
}

/* Waits up to ms for a member to report one of the roles (a ","-joined list). */
static bool sf_test_wait_mode(sf_test_zk *zk, const char *roles, int ms)
{
    char mode[64] = "";
    for (int i = 0; i < ms / 200; i++) {
        if (sf_test_zk_mode(zk, mode, sizeof mode) == 0 && strcmp(mode, "none") != 0 &&
            strstr(roles, mode))
            return true;
        sf_test_sleep_ms(200);
    }
    fprintf(stderr, "ensemble member %s is '%s', wanted %s\n", zk->dir, mode, roles);
    return false;
}

void sf_test_ensemble_destroy(sf_test_ensemble *e)
{
    for (int i = 0; i < 3; i++)
        sf_test_zk_destroy(&e->zk[i]);
    for (int i = 0; i < 4; i++) {
        sf_test_proxy_stop(e->px[i]);
        e->px[i] = NULL;
    }
}

bool sf_test_ensemble_start(sf_test_ensemble *e, const char *extra_cfg)
{
    memset(e, 0, sizeof *e);
    int c[3], q[3], el[3];
    for (int i = 0; i < 3; i++) {
        c[i] = sf_test_zk_free_port();
        q[i] = sf_test_zk_free_port();
        el[i] = sf_test_zk_free_port();
    }
    for (int i = 0; i < 2; i++) {
        e->px[2 * i] = sf_test_proxy_start(q[i]);
        e->px[2 * i + 1] = sf_test_proxy_start(el[i]);
        if (!e->px[2 * i] || !e->px[2 * i + 1])
            return false;
    }
    const char *extra = extra_cfg ? extra_cfg : "";
    char direct[768], via[768];
    snprintf(direct, sizeof direct, "initLimit=25\nsyncLimit=25\n%s"
             "server.1=127.0.0.1:%d:%d\nserver.2=127.0.0.1:%d:%d\nserver.3=127.0.0.1:%d:%d\n",
             extra, q[0], el[0], q[1], el[1], q[2], el[2]);
    snprintf(via, sizeof via, "initLimit=25\nsyncLimit=25\n%s"
             "server.1=127.0.0.1:%d:%d\nserver.2=127.0.0.1:%d:%d\nserver.3=127.0.0.1:%d:%d\n",
             extra, sf_test_proxy_port(e->px[0]), sf_test_proxy_port(e->px[1]),
             sf_test_proxy_port(e->px[2]), sf_test_proxy_port(e->px[3]), q[2], el[2]);
    if (sf_test_zk_start_member(&e->zk[0], 1, c[0], direct) != 0 ||
        sf_test_zk_start_member(&e->zk[1], 2, c[1], direct) != 0 ||
        !sf_test_wait_mode(&e->zk[1], "leader", SF_TEST_ENSEMBLE_WAIT_MS) ||
        sf_test_zk_start_member(&e->zk[2], 3, c[2], via) != 0 ||
        !sf_test_wait_mode(&e->zk[2], "follower", SF_TEST_ENSEMBLE_WAIT_MS))
        return false;
    snprintf(e->member3_hosts, sizeof e->member3_hosts, "127.0.0.1:%d", c[2]);
    snprintf(e->quorum_hosts, sizeof e->quorum_hosts, "127.0.0.1:%d", c[1]);
    return true;
}

void sf_test_ensemble_cut_member3(sf_test_ensemble *e)
{
    for (int i = 0; i < 4; i++)
        sf_test_proxy_set_mode(e->px[i], SF_PROXY_BLACKHOLE);
}

bool sf_test_ensemble_mend_member3(sf_test_ensemble *e)
{
    for (int i = 0; i < 4; i++)
        sf_test_proxy_set_mode(e->px[i], SF_PROXY_FORWARD);
    return sf_test_wait_mode(&e->zk[2], "follower", SF_TEST_ENSEMBLE_WAIT_MS);
}

int sf_test_registry_main(const char *name, Suite *suite, sf_test_zk *zk)
{
    char base[] = "/tmp/sf-zk-tests-XXXXXX";
    if (!mkdtemp(base) || setenv("SF_TEST_ZK_TMP", base, 1) != 0) {
        fprintf(stderr, "%s: cannot make a temporary directory: %s\n", name, strerror(errno));
        return EXIT_FAILURE;
    }
    if (sf_test_zk_start(zk) != 0) {
        sf_test_zk_stop_all_under(base);
        return EXIT_FAILURE;
    }
    zoo_set_debug_level(0); /* the client logs every refused reconnect */
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    sf_test_zk_destroy(zk);
    sf_test_zk_stop_all_under(base);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int sf_test_cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}
