/* procstats.c -- the process's own figures, from the kernel: getrusage and getrlimit, and
 * /proc/self/statm and /proc/self/fd (Linux, which is all this builds on). */
#include "procstats.h"

#include <glib.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

static int64_t sf_procstats_start_us;

void sf_procstats_mark_start(void)
{
    sf_procstats_start_us = g_get_real_time();
}

/* Entries of /proc/self/fd, less the one the listing itself holds open; -1 when unreadable. */
static int64_t sf_procstats_open_fds(void)
{
    GDir *dir = g_dir_open("/proc/self/fd", 0, NULL);
    if (dir == NULL)
        return -1;
    int64_t n = 0;
    while (g_dir_read_name(dir) != NULL)
        n++;
    g_dir_close(dir);
    return n - 1;
}

void sf_procstats_read(sf_procstats *out)
{
    out->start_time_s = (double)sf_procstats_start_us / 1e6;
    out->open_fds = sf_procstats_open_fds();
    struct rlimit rl;
    out->max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                       ? (int64_t)rl.rlim_cur
                       : -1;
    /* statm: the sizes in pages, the whole program's first, then what is resident. */
    out->resident_bytes = out->virtual_bytes = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        long long size, resident;
        long page = sysconf(_SC_PAGESIZE);
        if (fscanf(f, "%lld %lld", &size, &resident) == 2 && page > 0) {
            out->virtual_bytes = (int64_t)size * page;
            out->resident_bytes = (int64_t)resident * page;
        }
        fclose(f);
    }
    struct rusage ru;
    out->cpu_seconds = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        out->cpu_seconds = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}
