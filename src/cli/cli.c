/* cli.c -- the `snowflake` command-line tool: decodes ids into their fields,
 * and asks a running snowflaked for ids (the id, ids and info commands live
 * in cli_rpc.c; range, compose and encode in cli_ids.c).
 *
 * Usage errors exit 2; bad ids are reported after the good ones are decoded,
 * with exit 1, so a pipeline keeps every result it can get. */
#define _POSIX_C_SOURCE 200809L
#include "cli_ids.h"
#include "cli_rpc.h"
#include "lib/snowflake.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cli_usage(FILE *out)
{
    fprintf(out,
            "Usage: snowflake [OPTIONS] COMMAND [ARGS]\n"
            "\n"
            "Commands:\n"
            "  decode [--json] [--epoch MS] [--base32|--base58|--base62] [ID...]\n"
            "                 print the fields of each id (from the arguments, or one per\n"
            "                 line on standard input): time, datacenter, worker, sequence\n");
    cli_ids_usage(out);
    cli_rpc_usage(out);
    fprintf(out,
            "\n"
            "Options:\n"
            "  -h, --help     show this help\n"
            "\n"
            "Ids are decimal integers 0..%" PRId64 ". The default epoch is Twitter's, %lld ms.\n",
            INT64_MAX, (long long)SF_TWITTER_EPOCH_MS);
}

/* Prints one id in the chosen format; the table header is printed once by the caller. */
static void cli_print_decoded(const sf_decoded *d, bool json)
{
    char when[SF_ISO8601_MAX];
    sf_format_iso8601(d->timestamp_ms, when, sizeof when);
    if (json)
        printf("{\"id\":%" PRId64 ",\"id_str\":\"%" PRId64 "\",\"timestamp_ms\":%" PRId64
               ",\"time\":\"%s\",\"datacenter_id\":%" PRId64 ",\"worker_id\":%" PRId64
               ",\"sequence\":%" PRId64 "}\n",
               d->id, d->id, d->timestamp_ms, when, d->datacenter_id, d->worker_id, d->sequence);
    else
        printf("%-20" PRId64 " %-25s %-14" PRId64 " %10" PRId64 " %6" PRId64 " %8" PRId64 "\n",
               d->id, when, d->timestamp_ms, d->datacenter_id, d->worker_id, d->sequence);
}

/* Decodes one textual id (decimal, or in base); returns false (after printing why) if it is
 * not one. */
static bool cli_decode_one(const char *text, int64_t epoch, sf_id_base base, bool json)
{
    int64_t id;
    sf_decoded d;
    sf_error err;
    if (!cli_ids_parse(text, base, &id))
        return false;
    if (sf_decode(id, epoch, &d, &err) != SF_OK) {
        fprintf(stderr, "snowflake: %s\n", err.message);
        return false;
    }
    cli_print_decoded(&d, json);
    return true;
}

static int cli_decode(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 'j' },
        { "epoch", required_argument, NULL, 'e' },
        { "help", no_argument, NULL, 'h' },
        { "base32", no_argument, NULL, SF_BASE32 },
        { "base58", no_argument, NULL, SF_BASE58 },
        { "base62", no_argument, NULL, SF_BASE62 },
        { NULL, 0, NULL, 0 },
    };
    sf_id_base base = SF_BASE10;
    bool json = false;
    int64_t epoch = SF_TWITTER_EPOCH_MS;
    int c;
    optind = 1;
    opterr = 0;
    /* "+": stop at the first id, so that negative ids reach the decoder and
     * are reported as ids, not as unknown options. */
    while ((c = getopt_long(argc, argv, "+je:h", longopts, NULL)) != -1) {
        if (cli_ids_negative_arg(c)) {
            optind--; /* "-5": an id, to be refused with its value */
            break;
        }
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'e':
            if (!cli_ids_parse_epoch(optarg, &epoch))
                return 2;
            break;
        case 'h':
            cli_usage(stdout);
            return 0;
        case SF_BASE32:
        case SF_BASE58:
        case SF_BASE62:
            base = (sf_id_base)c;
            break;
        default:
            fprintf(stderr, "snowflake: decode: unknown option '%s'\n", argv[optind - 1]);
            cli_usage(stderr);
            return 2;
        }
    }
    if (!json)
        printf("%-20s %-25s %-14s %10s %6s %8s\n", "id", "time (UTC)", "unix_ms", "datacenter",
               "worker", "sequence");
    int bad = 0;
    if (optind < argc) {
        for (int i = optind; i < argc; i++)
            bad += !cli_decode_one(argv[i], epoch, base, json);
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, stdin)) != -1) {
            line[strcspn(line, "\r\n")] = '\0';
            if (line[0] == '\0')
                continue;
            bad += !cli_decode_one(line, epoch, base, json);
        }
        free(line);
    }
    if (bad > 0) {
        fprintf(stderr, "snowflake: %d input%s could not be decoded\n", bad, bad == 1 ? "" : "s");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "decode") == 0)
        return cli_decode(argc - 1, argv + 1);
    if (cli_ids_handles(argv[1]))
        return cli_ids_main(argc - 1, argv + 1);
    if (cli_rpc_handles(argv[1]))
        return cli_rpc_main(argc, argv);
    fprintf(stderr, "snowflake: unknown command '%s' (try 'snowflake --help')\n", argv[1]);
    return 2;
}
