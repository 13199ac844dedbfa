/* zk_harness.c -- a real, throwaway ZooKeeper server for the C tests (wraps test/tools/zk-server.sh). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "zk_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Runs "zk-server.sh CMD DIR", keeping the first line it prints in out (if given). */
static int run_script(sf_test_zk *zk, const char *cmd, char *out, size_t outlen)
{
    const char *srcdir = getenv("top_srcdir");
    char line[512];
    snprintf(line, sizeof line, "'%s/test/tools/zk-server.sh' %s '%s'", srcdir ? srcdir : ".", cmd,
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

/* A new temporary directory for one server: under $SF_TEST_ZK_TMP when set (so a parent
 * process can stop whatever a killed test left running there), else under /tmp. */
static int make_dir(sf_test_zk *zk)
{
    const char *base = getenv("SF_TEST_ZK_TMP");
    snprintf(zk->dir, sizeof zk->dir, "%s/sf-zk-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(zk->dir)) {
        perror("zk_harness: mkdtemp");
        return -1;
    }
    return 0;
}

int sf_test_zk_start(sf_test_zk *zk)
{
    if (make_dir(zk) != 0)
        return -1;
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

int sf_test_zk_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    if (port < 0)
        perror("zk_harness: no free port on 127.0.0.1");
    return port;
}

/* Writes text into dir/name; false after printing why. */
static int write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

int sf_test_zk_start_member(sf_test_zk *zk, int myid, int client_port, const char *quorum_cfg)
{
    char data[300], text[32];
    if (make_dir(zk) != 0)
        return -1;
    snprintf(data, sizeof data, "%s/data", zk->dir);
    if (mkdir(data, 0700) != 0) {
        perror(data);
        return -1;
    }
    snprintf(text, sizeof text, "%d\n", myid);
    if (write_file(data, "myid", text) != 0)
        return -1;
    snprintf(text, sizeof text, "%d\n", client_port);
    if (write_file(zk->dir, "port", text) != 0 || write_file(zk->dir, "quorum.cfg", quorum_cfg) != 0)
        return -1;
    return run_script(zk, "start", zk->hosts, sizeof zk->hosts);
}

int sf_test_zk_mode(sf_test_zk *zk, char *out, size_t outlen)
{
    return run_script(zk, "mode", out, outlen);
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

int sf_test_zk_stop_all_under(const char *base)
{
    const char *srcdir = getenv("top_srcdir");
    char line[1024];
    snprintf(line, sizeof line, "for d in '%s'/sf-zk-*; do [ -d \"$d\" ] && '%s/test/tools/zk-server.sh' "
             "stop \"$d\"; done; rm -rf '%s'", base, srcdir ? srcdir : ".", base);
    if (system(line) != 0) {
        fprintf(stderr, "zk_harness: could not clean up %s\n", base);
        return -1;
    }
    return 0;
}

int sf_test_zk_set_extra_cfg(sf_test_zk *zk, const char *cfg)
{
    return write_file(zk->dir, "extra.cfg", cfg);
}
