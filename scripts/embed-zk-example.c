/* embed-zk-example.c -- a program that makes ids in process under a worker id it holds in
 * ZooKeeper (libsnowflake-zk): it claims the lowest free id under /snowflake-servers, prints
 * three ids and the id it held, and releases it. Usage: embed-zk-example HOST:PORT[,...] */
#include <snowflake_zk.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    sfz_options opts;
    sfz_error err;
    sfz *h;
    if (argc != 2)
        return fprintf(stderr, "usage: %s HOST:PORT[,HOST:PORT...]\n", argv[0]), 2;
    sfz_options_init(&opts);
    opts.zookeeper = argv[1];
    opts.datacenter_id = 1;
    if (sfz_start(&opts, &h, &err) != SFZ_OK)
        return fprintf(stderr, "cannot start: %s\n", err.message), 1;
    for (int i = 0; i < 3; i++) {
        int64_t id;
        /* SFZ_ERR_FENCED means the lease is not held right now: a real program would
         * answer "unavailable" and try again later. */
        if (sfz_next_id(h, &id, &err) != SFZ_OK)
            return fprintf(stderr, "%s\n", err.message), sfz_stop(h), 1;
        printf("%lld\n", (long long)id);
    }
    sfz_state state;
    sfz_get_state(h, &state);
    printf("worker id %lld\n", (long long)state.worker_id);
    sfz_stop(h);
    return 0;
}
