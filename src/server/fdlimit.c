/* fdlimit.c -- listeners' connections fitted to the open-file limit (fdlimit.h). */
#include "fdlimit.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/resource.h>

#include <glib.h>

/* Raises the soft limit toward want (never past the hard one) and reads the limits in force
 * into rl; false when they cannot be read (nothing is then checked). */
static bool sf_fdlimit_raise(rlim_t want, struct rlimit *rl)
{
    if (getrlimit(RLIMIT_NOFILE, rl) != 0) {
        g_warning("cannot read the open-file limit: %s; max_connections is not checked "
                  "against it", g_strerror(errno));
        return false;
    }
    if (rl->rlim_cur != RLIM_INFINITY && rl->rlim_cur < want && rl->rlim_cur < rl->rlim_max) {
        struct rlimit raised = *rl;
        raised.rlim_cur = rl->rlim_max != RLIM_INFINITY && rl->rlim_max < want ? rl->rlim_max
                                                                                : want;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            *rl = raised;
        else
            g_warning("cannot raise the open-file limit from %lu to %lu: %s",
                      (unsigned long)rl->rlim_cur, (unsigned long)raised.rlim_cur,
                      g_strerror(errno));
    }
    return true;
}

void sf_fdlimit_fit(sf_fdlimit_port *ports, size_t n)
{
    rlim_t kept = SF_FDLIMIT_RESERVE, wanted = 0;
    for (size_t i = 0; i < n; i++) {
        kept += (rlim_t)ports[i].thread_fds;
        wanted += (rlim_t)*ports[i].max_connections;
    }
    struct rlimit rl;
    if (!sf_fdlimit_raise(kept + wanted, &rl) || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur >= kept + wanted)
        return;
    rlim_t limit = rl.rlim_cur, room = limit > kept ? limit - kept : 0;
    for (size_t i = 0; i < n; i++) {
        int want = *ports[i].max_connections;
        rlim_t share = room * (rlim_t)want / wanted;
        int fit = share > SF_FDLIMIT_MIN_CONNECTIONS ? (int)share : SF_FDLIMIT_MIN_CONNECTIONS;
        if (fit >= want)
            continue;
        g_warning("%s = %d does not fit the open-file limit of %lu (ulimit -n; hard limit %lu) "
                  "less %lu descriptors kept for the listeners' threads, the admin endpoint and "
                  "ZooKeeper%s: serving at most %d connections; raise the hard limit (ulimit "
                  "-Hn, systemd LimitNOFILE=) to serve more",
                  ports[i].name, want, (unsigned long)limit,
                  rl.rlim_max == RLIM_INFINITY ? 0ul : (unsigned long)rl.rlim_max,
                  (unsigned long)kept, n > 1 ? ", the rest shared among the ports by what each "
                  "asks" : "", fit);
        *ports[i].max_connections = fit;
    }
}
