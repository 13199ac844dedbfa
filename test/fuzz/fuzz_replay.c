/* fuzz_replay.c -- runs a fuzz target over saved inputs, without libFuzzer.
 * Each crash, leak or hang the fuzzers found is kept as a file; make check
 * replays them all through this driver (under ASan/UBSan in build-asan/). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    size_t cap = 1 << 16, len = 0, n;
    uint8_t *buf = malloc(cap);
    if (buf == NULL) {
        fclose(f);
        return 1;
    }
    while ((n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (bigger == NULL) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = bigger;
        }
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int failed = 0;
    for (int i = 1; i < argc; i++)
        failed += fuzz_replay_file(argv[i]);
    printf("fuzz_replay: %d passed, %d failed\n", argc - 1 - failed, failed);
    return failed ? 1 : 0;
}
