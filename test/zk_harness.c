/* zk_harness.c -- a real, throwaway ZooKeeper server for the C tests (wraps test/zk-server.sh). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "zk_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs "zk-server.sh CMD DIR", keeping the first line it prints in out (if given). */
static int run_script(sf_test_zk *zk, const char *cmd, char *out, size_t outlen)
{
    const char *srcdir = getenv("top_srcdir");
    char line[512];
    snprintf(line, sizeof line, "'%s/test/zk-server.sh' %s '%s'", srcdir ? srcdir : ".", cmd,
             zk->dir);
    FILE *p = popen(line, "r");
    if (!p) {
        perror("zk_harness: popen");
        return -1;
    }
    char buf[128] = "";
    if (!fgets(buf, sizeof buf, p))
        buf[0] = '\0';
    int status = pclose(p);
    if (status != 0) {
        fprintf(stderr, "zk_harness: '%s' failed (status %d)\n", line, status);
        return -1;
    }
    buf[strcspn(buf, "\r\n")] = '\0';
    if (out)
        snprintf(out, outlen, "%s", buf);
    return 0;
}

int sf_test_zk_start(sf_test_zk *zk)
{
    snprintf(zk->dir, sizeof zk->dir, "/tmp/sf-zk-XXXXXX");
    if (!mkdtemp(zk->dir)) {
        perror("zk_harness: mkdtemp");
        return -1;
    }
    return run_script(zk, "start", zk->hosts, sizeof zk->hosts);
}

int sf_test_zk_stop(sf_test_zk *zk)
{
    return run_script(zk, "stop", NULL, 0);
}

int sf_test_zk_restart(sf_test_zk *zk)
{
    return run_script(zk, "start", zk->hosts, sizeof zk->hosts);
}

void sf_test_zk_destroy(sf_test_zk *zk)
{
    if (!zk->dir[0])
        return;
    sf_test_zk_stop(zk);
    char line[512];
    snprintf(line, sizeof line, "rm -rf '%s'", zk->dir);
    if (system(line) != 0)
        fprintf(stderr, "zk_harness: could not remove %s\n", zk->dir);
    zk->dir[0] = '\0';
}
