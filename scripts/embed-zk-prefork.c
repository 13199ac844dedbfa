/* embed-zk-prefork.c -- a pre-fork server on libsnowflake-zk (the shape of an nginx-style
 * master and its workers, Apache prefork, gunicorn --preload): the master forks WORKERS
 * processes and holds no handle itself; each worker starts a handle of its own after the
 * fork, so each holds its own worker id, prints "worker W: ID" for three ids, and stops its
 * handle. A handle started before fork() would be refused in the children
 * (SFZ_ERR_FORKED): the ids of two processes sharing one worker id would repeat.
 * Usage: embed-zk-prefork HOST:PORT[,...] [WORKERS] */
#include <snowflake_zk.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* One worker process: its own handle, three ids, a clean stop. */
static int serve(const char *zookeeper)
{
    sfz_options opts;
    sfz_error err;
    sfz *h;
    sfz_options_init(&opts);
    opts.zookeeper = zookeeper;
    opts.datacenter_id = 1;
    if (sfz_start(&opts, &h, &err) != SFZ_OK)
        return fprintf(stderr, "pid %ld cannot start: %s\n", (long)getpid(), err.message), 1;
    for (int i = 0; i < 3; i++) {
        int64_t id;
        if (sfz_next_id(h, &id, &err) != SFZ_OK)
            return fprintf(stderr, "%s\n", err.message), sfz_stop(h), 1;
        printf("worker %lld: %lld\n", (long long)sfz_worker_id(h), (long long)id);
    }
    fflush(stdout);
    sfz_stop(h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3)
        return fprintf(stderr, "usage: %s HOST:PORT[,HOST:PORT...] [WORKERS]\n", argv[0]), 2;
    int workers = argc == 3 ? atoi(argv[2]) : 2;
    if (workers < 1 || workers > 32)
        return fprintf(stderr, "WORKERS %s is outside 1..32\n", argv[2]), 2;
    fflush(stdout); /* nothing buffered is printed twice */
    for (int i = 0; i < workers; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return perror("fork"), 1;
        if (pid == 0)
            _exit(serve(argv[1]));
    }
    int failed = 0;
    for (int status; wait(&status) > 0;)
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed != 0;
}
