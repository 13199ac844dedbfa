/* embed-example.c -- the smallest program that embeds libsnowflake. */
#include <snowflake.h>
#include <stdio.h>

int main(void)
{
    sf_worker_options opts;
    sf_error err;
    sf_worker_options_init(&opts);
    opts.worker_id = 1;
    sf_worker *w = sf_worker_new(&opts, &err);
    if (w == NULL)
        return fprintf(stderr, "%s\n", err.message), 1;
    for (int i = 0; i < 3; i++) {
        int64_t id;
        if (sf_worker_next_id(w, &id, &err) != SF_OK)
            return fprintf(stderr, "%s\n", err.message), 1;
        printf("%lld\n", (long long)id);
    }
    sf_worker_free(w);
    return 0;
}
