/* client-example.c -- a program that asks a fleet of snowflaked nodes for ids through
 * libsnowflake-client: a node that is down is skipped, so the ids come as long as one node
 * serves. Usage: client-example HOST:PORT[,HOST:PORT...] */
#include <snowflake_client.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    sfc_options opts;
    sfc_error err;
    if (argc != 2)
        return fprintf(stderr, "usage: %s HOST:PORT[,HOST:PORT...]\n", argv[0]), 2;
    sfc_options_init(&opts);
    opts.servers = argv[1]; /* or opts.zookeeper_hosts, to follow the registered nodes */
    sfc_client *c = sfc_open(&opts, &err);
    if (c == NULL)
        return fprintf(stderr, "cannot start: %s\n", err.message), 1;
    for (int i = 0; i < 3; i++) {
        int64_t id;
        sfc_call call;
        /* SFC_ERR_UNAVAILABLE: no node answered in time; the message says what each did. */
        if (sfc_next_id(c, &id, &call, &err) != SFC_OK)
            return fprintf(stderr, "%s\n", err.message), sfc_close(c), 1;
        printf("%lld from %s\n", (long long)id, call.server);
    }
    sfc_close(c);
    return 0;
}
