/* embed-zk-prefork.c -- a pre-fork server on libsnowflake-zk (the shape of an nginx-style
 * master and its workers, Apache prefork, gunicorn --preload): the master forks WORKERS
 * processes and holds no handle itself; each worker starts a handle of its own after the
 * fork, so each holds its own worker id, prints "worker W: ID" for three ids, and serves
 * until the master stops it -- here, once every worker has printed its ids, so that all
 * of them hold their worker ids at once. A handle started before fork() would be refused
 * in the children (SFZ_ERR_FORKED): the ids of two processes sharing one worker id would
 * repeat.
 * Usage: embed-zk-prefork HOST:PORT[,...] [WORKERS] */
#include <snowflake_zk.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* One worker process: its own handle, three ids, a byte on `ready` to say it serves, then
 * it holds its worker id until `stop` reads end of file (the master closed it), and stops
 * its handle. */
static int serve(const char *zookeeper, int ready, int stop)
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
    char c = 1;
    if (write(ready, &c, 1) != 1)
        return perror("write to the master"), sfz_stop(h), 1;
    close(ready);
    while (read(stop, &c, 1) > 0)
        ;
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
    int ready[2], stop[2];
    if (pipe(ready) != 0 || pipe(stop) != 0)
        return perror("pipe"), 1;
    fflush(stdout); /* nothing buffered is printed twice */
    for (int i = 0; i < workers; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return perror("fork"), 1;
        if (pid == 0) {
            close(ready[0]);
            close(stop[1]);
            _exit(serve(argv[1], ready[1], stop[0]));
        }
    }
    /* Every worker either says it serves or exits; either way its end of `ready` closes,
     * and end of file here means none is still starting. */
    close(ready[1]);
    close(stop[0]);
    char c;
    while (read(ready[0], &c, 1) > 0)
        ;
    close(stop[1]);
    int failed = 0;
    for (int status; wait(&status) > 0;)
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed != 0;
}
