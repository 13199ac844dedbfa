/* procstats.h -- the process's own figures under the names every Prometheus client gives them
 * (process_start_time_seconds, process_open_fds, process_max_fds,
 * process_resident_memory_bytes, process_virtual_memory_bytes, process_cpu_seconds_total). */
#ifndef SF_PROCSTATS_H
#define SF_PROCSTATS_H

#include <stdint.h>

typedef struct sf_procstats {
    double start_time_s;   /* Unix seconds: when sf_procstats_mark_start ran */
    int64_t open_fds;      /* -1 when /proc cannot be read */
    int64_t max_fds;       /* the soft RLIMIT_NOFILE; -1 = unlimited or unknown */
    int64_t resident_bytes; /* -1 when /proc cannot be read */
    int64_t virtual_bytes;  /* -1 when /proc cannot be read */
    double cpu_seconds;    /* user and system time so far */
} sf_procstats;

/* Records now as the process's start: call first thing in main(). */
void sf_procstats_mark_start(void);

/* The figures now. */
void sf_procstats_read(sf_procstats *out);

#endif /* SF_PROCSTATS_H */
