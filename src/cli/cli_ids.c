/* cli_ids.c -- `snowflake range`, `compose` and `encode`: ids from times and fields, and ids as
 * short strings, all computed locally by libsnowflake (no server is asked).
 *
 * Times are ISO-8601 (GLib reads them; UTC when no offset is given) or Unix ms. Usage errors
 * exit 2; an id that cannot be encoded is reported after the good ones, with exit 1. */
#define _POSIX_C_SOURCE 200809L
#include "cli_ids.h"

#include <getopt.h>
#include <glib.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CLI_IDS_EXIT_BAD_INPUT 1
#define CLI_IDS_EXIT_USAGE 2

void cli_ids_usage(FILE *out)
{
    fprintf(out,
            "  range [--json] [--epoch MS] FROM TO\n"
            "                 print the lowest and the highest id any worker can make from\n"
            "                 FROM to TO, both inclusive to the millisecond: the bounds of\n"
            "                 WHERE id BETWEEN lo AND hi\n"
            "  compose --time T [--datacenter D] [--worker W] [--sequence S] [--epoch MS]\n"
            "                 print the id of those fields (D and W 0..31, S 0..4095; each 0\n"
            "                 by default)\n"
            "  encode --base32|--base58|--base62 ID...\n"
            "                 print each decimal id in that form; decode reads them back with\n"
            "                 the same flag. base32 (Crockford, 13 characters) and base62 (11)\n"
            "                 are fixed width and sort as the ids do; base58 is\n"
            "                 bwmarrin/snowflake's form, which does not\n"
            "Times (FROM, TO, T) are ISO-8601, UTC unless an offset is given\n"
            "(2026-11-01T00:00Z, 2026-11-01T00:00:00.250+02:00, 2026-11-01), or Unix ms.\n");
}

bool cli_ids_handles(const char *cmd)
{
    return strcmp(cmd, "range") == 0 || strcmp(cmd, "compose") == 0 ||
           strcmp(cmd, "encode") == 0;
}

bool cli_ids_parse(const char *text, sf_id_base base, int64_t *id)
{
    sf_error err;
    if (sf_id_parse(text, base, id, &err) == SF_OK)
        return true;
    fprintf(stderr, "snowflake: %s\n", err.message);
    return false;
}

/* GLib's reading of ISO-8601 as Unix ms (UTC when text has no offset), or false. */
static bool cli_ids_iso8601(const char *text, int64_t *ms)
{
    GTimeZone *utc = g_time_zone_new_utc();
    GDateTime *t = g_date_time_new_from_iso8601(text, utc);
    g_time_zone_unref(utc);
    if (t == NULL)
        return false;
    *ms = g_date_time_to_unix(t) * 1000 + g_date_time_get_microsecond(t) / 1000;
    g_date_time_unref(t);
    return true;
}

/* Reads a time: Unix ms (digits), or ISO-8601 as GLib reads it, also with the seconds left
 * out ("T00:00Z", which GLib needs written "T00:00:00Z") or as a date alone (its midnight). */
static bool cli_ids_parse_time(const char *what, const char *text, int64_t *ms)
{
    if (text[0] != '\0' && strspn(text, "0123456789") == strlen(text)) {
        if (sf_id_parse(text, SF_BASE10, ms, NULL) == SF_OK)
            return true;
    } else if (cli_ids_iso8601(text, ms)) {
        return true;
    } else {
        /* "2026-11-01" + "T00:00:00", or "2026-11-01T00:00" + ":00" + the rest. */
        const char *t = strchr(text, 'T');
        size_t at = t != NULL ? (size_t)(t - text) + 6 : strlen(text);
        bool short_time = t != NULL && strlen(t) >= 6 && t[3] == ':' && t[6] != ':';
        if (t == NULL || short_time) {
            char *fixed = g_strdup_printf("%.*s%s%s", (int)at, text, t ? ":00" : "T00:00:00",
                                          text + at);
            bool ok = cli_ids_iso8601(fixed, ms);
            g_free(fixed);
            if (ok)
                return true;
        }
    }
    fprintf(stderr, "snowflake: %s '%s' is not a time: expected ISO-8601 "
            "(2026-11-01T00:00Z; UTC unless an offset is given) or Unix ms 0..%" PRId64 "\n",
            what, text, INT64_MAX);
    return false;
}

bool cli_ids_negative_arg(int c)
{
    return c == '?' && optopt >= '0' && optopt <= '9';
}

bool cli_ids_parse_epoch(const char *text, int64_t *epoch)
{
    if (sf_id_parse(text, SF_BASE10, epoch, NULL) == SF_OK && *epoch <= SF_MAX_EPOCH_MS)
        return true;
    fprintf(stderr, "snowflake: --epoch '%s' is not valid: expected ms 0..%lld (up to "
            "2100-01-01)\n", text, SF_MAX_EPOCH_MS);
    return false;
}

/* Reads a field of compose: a decimal 0..max; false (said why) when it is not. */
static bool cli_ids_parse_field(const char *flag, const char *text, int64_t max, int64_t *out)
{
    if (sf_id_parse(text, SF_BASE10, out, NULL) == SF_OK && *out <= max)
        return true;
    fprintf(stderr, "snowflake: %s '%s' is not valid: expected 0..%" PRId64 "\n", flag, text,
            max);
    return false;
}

/* --help of range, compose and encode: their part of the usage, exit 0 (as decode's). */
static int cli_ids_help(void)
{
    cli_ids_usage(stdout);
    return 0;
}

/* Says an option is unknown, and how to get help. */
static int cli_ids_bad_option(const char *cmd, const char *arg)
{
    fprintf(stderr, "snowflake: %s: unknown option or missing value '%s' (try 'snowflake "
            "--help')\n", cmd, arg);
    return CLI_IDS_EXIT_USAGE;
}

static int cli_ids_range(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 'j' },
        { "epoch", required_argument, NULL, 'e' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bool json = false;
    int64_t epoch = SF_TWITTER_EPOCH_MS, from, to, lo, hi;
    int c;
    while ((c = getopt_long(argc, argv, "+je:h", longopts, NULL)) != -1) {
        if (c == 'h')
            return cli_ids_help();
        if (c == 'j')
            json = true;
        else if (c != 'e')
            return cli_ids_bad_option("range", argv[optind - 1]);
        else if (!cli_ids_parse_epoch(optarg, &epoch))
            return CLI_IDS_EXIT_USAGE;
    }
    if (argc - optind != 2) {
        fprintf(stderr, "snowflake: range takes two times, FROM and TO; got %d\n", argc - optind);
        return CLI_IDS_EXIT_USAGE;
    }
    sf_error err;
    if (!cli_ids_parse_time("FROM", argv[optind], &from) ||
        !cli_ids_parse_time("TO", argv[optind + 1], &to))
        return CLI_IDS_EXIT_USAGE;
    if (sf_id_range(from, to, epoch, &lo, &hi, &err) != SF_OK) {
        fprintf(stderr, "snowflake: %s\n", err.message);
        return CLI_IDS_EXIT_USAGE;
    }
    if (json)
        printf("{\"from_ms\":%" PRId64 ",\"to_ms\":%" PRId64 ",\"lo\":%" PRId64 ",\"lo_str\":\"%"
               PRId64 "\",\"hi\":%" PRId64 ",\"hi_str\":\"%" PRId64 "\"}\n", from, to, lo, lo, hi,
               hi);
    else
        printf("%" PRId64 " %" PRId64 "\n", lo, hi);
    return 0;
}

static int cli_ids_compose(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "time", required_argument, NULL, 't' },
        { "datacenter", required_argument, NULL, 'd' },
        { "worker", required_argument, NULL, 'w' },
        { "sequence", required_argument, NULL, 's' },
        { "epoch", required_argument, NULL, 'e' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    sf_decoded f = { .timestamp_ms = 0 };
    int64_t epoch = SF_TWITTER_EPOCH_MS, id;
    bool timed = false, ok = true;
    int c;
    while (ok && (c = getopt_long(argc, argv, "+t:d:w:s:e:h", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            ok = timed = cli_ids_parse_time("--time", optarg, &f.timestamp_ms);
            break;
        case 'd':
            ok = cli_ids_parse_field("--datacenter", optarg, SF_MAX_DATACENTER_ID,
                                     &f.datacenter_id);
            break;
        case 'w':
            ok = cli_ids_parse_field("--worker", optarg, SF_MAX_WORKER_ID, &f.worker_id);
            break;
        case 's':
            ok = cli_ids_parse_field("--sequence", optarg, SF_SEQUENCE_MASK, &f.sequence);
            break;
        case 'e':
            ok = cli_ids_parse_epoch(optarg, &epoch);
            break;
        case 'h':
            return cli_ids_help();
        default:
            return cli_ids_bad_option("compose", argv[optind - 1]);
        }
    }
    if (!ok)
        return CLI_IDS_EXIT_USAGE;
    if (!timed || optind != argc) {
        fprintf(stderr, "snowflake: compose needs --time T and takes no other arguments\n");
        return CLI_IDS_EXIT_USAGE;
    }
    sf_error err;
    if (sf_compose(&f, epoch, &id, &err) != SF_OK) {
        fprintf(stderr, "snowflake: %s\n", err.message);
        return CLI_IDS_EXIT_USAGE;
    }
    printf("%" PRId64 "\n", id);
    return 0;
}

static int cli_ids_encode(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "base32", no_argument, NULL, SF_BASE32 },
        { "base58", no_argument, NULL, SF_BASE58 },
        { "base62", no_argument, NULL, SF_BASE62 },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    sf_id_base base = SF_BASE10;
    int c;
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        if (cli_ids_negative_arg(c)) {
            optind--; /* "-5": an id, to be refused with its value */
            break;
        }
        if (c == 'h')
            return cli_ids_help();
        if (c != SF_BASE32 && c != SF_BASE58 && c != SF_BASE62)
            return cli_ids_bad_option("encode", argv[optind - 1]);
        base = (sf_id_base)c;
    }
    if (base == SF_BASE10 || optind == argc) {
        fprintf(stderr, "snowflake: encode needs one of --base32, --base58, --base62 and at "
                "least one id\n");
        return CLI_IDS_EXIT_USAGE;
    }
    int bad = 0;
    for (int i = optind; i < argc; i++) {
        char text[SF_ID_TEXT_MAX];
        int64_t id;
        if (!cli_ids_parse(argv[i], SF_BASE10, &id) ||
            sf_id_encode(id, base, text, sizeof text, NULL) != SF_OK) {
            bad++;
            continue;
        }
        printf("%s\n", text);
    }
    return bad > 0 ? CLI_IDS_EXIT_BAD_INPUT : 0;
}

int cli_ids_main(int argc, char **argv)
{
    optind = 1;
    opterr = 0;
    if (strcmp(argv[0], "range") == 0)
        return cli_ids_range(argc, argv);
    if (strcmp(argv[0], "compose") == 0)
        return cli_ids_compose(argc, argv);
    return cli_ids_encode(argc, argv);
}
