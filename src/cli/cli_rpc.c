/* cli_rpc.c -- `snowflake id`, `ids N`, `info` and `watch`: ask a fleet of snowflaked nodes
 * through libsnowflake-client, so the tool fails over as any program on the library does:
 * one node (--host, --port), a list (--servers) or the nodes registered in ZooKeeper
 * (--zookeeper). */
#define _POSIX_C_SOURCE 200809L
#include "cli_rpc.h"

#include "client/snowflake_client.h"
#include "common/clocks.h"
#include "common/hostport.h"
#include "lib/snowflake.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* What the command line asked for. */
typedef struct cli_rpc_options {
    const char *host;
    int port;
    const char *servers;
    const char *zookeeper;
    const char *zookeeper_path;
    int timeout_ms;
    const char *agent;
    const char *command;
    int count;   /* ids N */
    int seconds; /* watch: 0 = until interrupted */
    int prefetch;
} cli_rpc_options;

void cli_rpc_usage(FILE *out)
{
    fprintf(out,
            "  [CONNECTION] id [--agent A]\n"
            "                 ask a running snowflaked for one id\n"
            "  [CONNECTION] ids N [--agent A]\n"
            "                 ask for N ids (1..%d; the server's max_batch_size may be lower)\n"
            "  [CONNECTION] info\n"
            "                 print a serving node's address, worker id, datacenter id, time\n"
            "                 (ISO-8601 UTC and Unix ms) and that time's skew from the local\n"
            "                 clock in ms\n"
            "  [CONNECTION] watch [--seconds S] [--prefetch N] [--agent A]\n"
            "                 ask for ids without pause and print, each second, ids/s,\n"
            "                 failovers, errors and the nodes serving, for S seconds\n"
            "                 (1..86400; default until interrupted); --prefetch N keeps N ids\n"
            "                 (1..1000000) fetched ahead\n"
            "\n"
            "Connection options (before the command):\n"
            "  --host H       server address (default %s)\n"
            "  --port P       server port 1..65535 (default %d)\n"
            "  --servers L    a list of nodes, host:port,host:port,... (instead of --host\n"
            "                 and --port); a call moves to another node when one fails\n"
            "  --zookeeper Z  the nodes registered in ZooKeeper Z (host:port,...), followed\n"
            "                 as they join and leave\n"
            "  --zookeeper-path P\n"
            "                 where they register (default /snowflake-servers)\n"
            "  --timeout-ms T bound each command's call by T ms, 1..600000 (default %d); with\n"
            "                 several nodes, one node's try by T/4 at most; when every\n"
            "                 node failed, they are tried again until T\n"
            "Option of id, ids and watch:\n"
            "  --agent A      the user agent sent (default %s); the server accepts a\n"
            "                 letter followed by letters, digits and '-'\n"
            "\n"
            "The id, ids and info commands exit 1 when the server refuses the request,\n"
            "2 on bad arguments and 3 when no node can be reached or none answers.\n",
            CLI_RPC_MAX_IDS, CLI_RPC_DEFAULT_HOST, CLI_RPC_DEFAULT_PORT,
            CLI_RPC_DEFAULT_TIMEOUT_MS, CLI_RPC_DEFAULT_AGENT);
}

bool cli_rpc_handles(const char *arg)
{
    static const char *const words[] = { "id", "ids", "info", "watch", "--host", "--port",
                                         "--timeout-ms", "--servers", "--zookeeper",
                                         "--zookeeper-path" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        if (strncmp(arg, words[i], n) == 0 && (arg[n] == '\0' || (arg[0] == '-' && arg[n] == '=')))
            return true;
    }
    return false;
}

/* Reads a decimal integer in [min, max] as every number of the tool is read; false on
 * anything else (blanks, a sign, junk, overflow, range). */
static bool cli_rpc_parse_int(const char *s, long min, long max, int *out)
{
    int64_t v;
    char why[200];
    if (!sf_decimal_parse("", s, min, max, &v, why, sizeof why))
        return false;
    *out = (int)v;
    return true;
}

/* Takes the value of --name VALUE or --name=VALUE at argv[*i]. Returns NULL
 * (after saying why) if the option is missing its value; advances *i. */
static const char *cli_rpc_option_value(int argc, char **argv, int *i, const char *name)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (arg[n] == '=')
        return arg + n + 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "snowflake: %s needs a value\n", name);
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

/* True if arg is the option name, alone or as name=value. */
static bool cli_rpc_is_option(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* An option's integer value in [min, max]; false after naming it and the range. */
static bool cli_rpc_int_option(int argc, char **argv, int *i, const char *name, long min,
                               long max, int *out)
{
    const char *v = cli_rpc_option_value(argc, argv, i, name);
    if (v == NULL)
        return false;
    if (!cli_rpc_parse_int(v, min, max, out)) {
        fprintf(stderr, "snowflake: %s '%s' is not valid: allowed %ld..%ld\n", name, v, min, max);
        return false;
    }
    return true;
}

/* An option's non-empty text; false after saying what was expected. */
static bool cli_rpc_text_option(int argc, char **argv, int *i, const char *name,
                                const char *expected, const char **out)
{
    const char *v = cli_rpc_option_value(argc, argv, i, name);
    if (v == NULL)
        return false;
    if (*v == '\0') {
        fprintf(stderr, "snowflake: %s is empty: expected %s\n", name, expected);
        return false;
    }
    *out = v;
    return true;
}

/* The checks across options, once all are read. */
static int cli_rpc_check(const cli_rpc_options *opts, bool have_count, bool have_agent,
                         bool have_host)
{
    const char *cmd = opts->command;
    if (cmd == NULL) {
        fprintf(stderr, "snowflake: no command given: expected id, ids N, info or watch\n");
        return CLI_RPC_EXIT_USAGE;
    }
    if (strcmp(cmd, "info") == 0 && have_agent) {
        fprintf(stderr, "snowflake: --agent applies to id, ids and watch, not info\n");
        return CLI_RPC_EXIT_USAGE;
    }
    if (strcmp(cmd, "ids") == 0 && !have_count) {
        fprintf(stderr, "snowflake: ids needs a count: allowed 1..%d\n", CLI_RPC_MAX_IDS);
        return CLI_RPC_EXIT_USAGE;
    }
    if ((opts->seconds > 0 || opts->prefetch > 0) && strcmp(cmd, "watch") != 0) {
        fprintf(stderr, "snowflake: --seconds and --prefetch apply to watch only\n");
        return CLI_RPC_EXIT_USAGE;
    }
    if ((opts->servers != NULL) + (opts->zookeeper != NULL) + have_host > 1) {
        fprintf(stderr, "snowflake: give one of --host/--port, --servers and --zookeeper\n");
        return CLI_RPC_EXIT_USAGE;
    }
    return CLI_RPC_EXIT_OK;
}

/* Fills opts from argv; returns CLI_RPC_EXIT_OK or CLI_RPC_EXIT_USAGE after
 * naming the bad argument and its allowed range. */
static int cli_rpc_parse(int argc, char **argv, cli_rpc_options *opts)
{
    bool have_count = false, have_agent = false, have_host = false, ok = true;
    for (int i = 1; i < argc && ok; i++) {
        const char *arg = argv[i];
        if (cli_rpc_is_option(arg, "--host")) {
            ok = cli_rpc_text_option(argc, argv, &i, "--host", "a host name or address",
                                     &opts->host);
            have_host = true;
        } else if (cli_rpc_is_option(arg, "--port")) {
            ok = cli_rpc_int_option(argc, argv, &i, "--port", 1, 65535, &opts->port);
            have_host = true;
        } else if (cli_rpc_is_option(arg, "--servers")) {
            ok = cli_rpc_text_option(argc, argv, &i, "--servers", "host:port,...",
                                     &opts->servers);
        } else if (cli_rpc_is_option(arg, "--zookeeper-path")) {
            ok = cli_rpc_text_option(argc, argv, &i, "--zookeeper-path", "a ZooKeeper path",
                                     &opts->zookeeper_path);
        } else if (cli_rpc_is_option(arg, "--zookeeper")) {
            ok = cli_rpc_text_option(argc, argv, &i, "--zookeeper", "host:port,...",
                                     &opts->zookeeper);
        } else if (cli_rpc_is_option(arg, "--timeout-ms")) {
            ok = cli_rpc_int_option(argc, argv, &i, "--timeout-ms", 1, 600000, &opts->timeout_ms);
        } else if (cli_rpc_is_option(arg, "--seconds")) {
            ok = cli_rpc_int_option(argc, argv, &i, "--seconds", 1, 86400, &opts->seconds);
        } else if (cli_rpc_is_option(arg, "--prefetch")) {
            ok = cli_rpc_int_option(argc, argv, &i, "--prefetch", 1, 1000000, &opts->prefetch);
        } else if (cli_rpc_is_option(arg, "--agent")) {
            ok = cli_rpc_text_option(argc, argv, &i, "--agent", "a user agent", &opts->agent);
            have_agent = true;
        } else if (opts->command == NULL &&
                   (strcmp(arg, "id") == 0 || strcmp(arg, "ids") == 0 ||
                    strcmp(arg, "info") == 0 || strcmp(arg, "watch") == 0)) {
            opts->command = arg;
        } else if (opts->command != NULL && strcmp(opts->command, "ids") == 0 && !have_count) {
            if (!cli_rpc_parse_int(arg, 1, CLI_RPC_MAX_IDS, &opts->count)) {
                fprintf(stderr, "snowflake: ids: count '%s' is not valid: allowed 1..%d\n", arg,
                        CLI_RPC_MAX_IDS);
                return CLI_RPC_EXIT_USAGE;
            }
            have_count = true;
        } else {
            fprintf(stderr, "snowflake: unexpected argument '%s' (try 'snowflake --help')\n", arg);
            return CLI_RPC_EXIT_USAGE;
        }
    }
    if (!ok)
        return CLI_RPC_EXIT_USAGE;
    return cli_rpc_check(opts, have_count, have_agent, have_host);
}

/* The exit status and message for a failed library call. */
static int cli_rpc_failed(const sfc_error *err)
{
    if (err->code == SFC_ERR_REFUSED || err->code == SFC_ERR_CLOCK) {
        fprintf(stderr, "snowflake: server refused the request: %s\n", err->message);
        return CLI_RPC_EXIT_REFUSED;
    }
    if (err->code == SFC_ERR_ARG) {
        fprintf(stderr, "snowflake: %s\n", err->message);
        return CLI_RPC_EXIT_USAGE;
    }
    fprintf(stderr, "snowflake: %s\n", err->message);
    return CLI_RPC_EXIT_UNREACHABLE;
}

/* `snowflake ids N` and `id`: the ids, one per line, in the server's order. */
static int cli_rpc_ids(sfc_client *c, const cli_rpc_options *opts)
{
    sfc_error err;
    if (strcmp(opts->command, "id") == 0) {
        int64_t id;
        if (sfc_next_id(c, &id, NULL, &err) != SFC_OK)
            return cli_rpc_failed(&err);
        printf("%" PRId64 "\n", id);
        return CLI_RPC_EXIT_OK;
    }
    int64_t *ids = malloc((size_t)opts->count * sizeof *ids);
    if (ids == NULL) {
        fprintf(stderr, "snowflake: out of memory for %d ids\n", opts->count);
        return CLI_RPC_EXIT_UNREACHABLE;
    }
    int rc = CLI_RPC_EXIT_OK;
    if (sfc_next_ids(c, ids, opts->count, NULL, &err) != SFC_OK)
        rc = cli_rpc_failed(&err);
    else
        for (int i = 0; i < opts->count; i++)
            printf("%" PRId64 "\n", ids[i]);
    free(ids);
    return rc;
}

/* `snowflake info`: a serving node's ids and clock. The skew compares the server's time
 * with the midpoint of the local clock around the call, so the round trip is not skew. */
static int cli_rpc_info(sfc_client *c)
{
    sfc_node_info info;
    sfc_error err;
    if (sfc_node_info_get(c, &info, &err) != SFC_OK)
        return cli_rpc_failed(&err);
    char when[SF_ISO8601_MAX];
    sf_format_iso8601(info.timestamp_ms, when, sizeof when);
    printf("server          %s\n", info.server);
    printf("worker_id       %" PRId64 "\n", info.worker_id);
    printf("datacenter_id   %" PRId64 "\n", info.datacenter_id);
    printf("server_time     %s\n", when);
    printf("server_time_ms  %" PRId64 "\n", info.timestamp_ms);
    printf("skew_ms         %" PRId64 "\n", info.skew_ms);
    printf("round_trip_ms   %" PRId64 "\n", info.round_trip_ms);
    return CLI_RPC_EXIT_OK;
}

static volatile sig_atomic_t cli_rpc_interrupted;

static void cli_rpc_on_signal(int sig)
{
    (void)sig;
    cli_rpc_interrupted = 1;
}

/* `snowflake watch`: asks without pause and prints a line a second, for an operator
 * checking a fleet: what got through, what moved to another node, what failed and why. */
static int cli_rpc_watch(sfc_client *c, const cli_rpc_options *opts)
{
    struct sigaction sa = {.sa_handler = cli_rpc_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    printf("%-24s %10s %9s %7s %8s  %s\n", "time (UTC)", "ids/s", "failovers", "errors",
           "serving", "last error");
    fflush(stdout);
    sfc_stats before, now;
    sfc_get_stats(c, &before);
    int64_t start = sf_clocks_mono_ms(), next = start + 1000;
    uint64_t errors_total = 0;
    char last_error[SFC_ERROR_MAX] = "";
    int seconds = 0;
    while (!cli_rpc_interrupted && (opts->seconds == 0 || seconds < opts->seconds)) {
        int64_t id;
        sfc_error err;
        if (sfc_next_id(c, &id, NULL, &err) != SFC_OK) {
            errors_total++;
            snprintf(last_error, sizeof last_error, "%s", err.message);
        }
        if (sf_clocks_mono_ms() < next)
            continue;
        next += 1000;
        seconds++;
        sfc_get_stats(c, &now);
        char when[SF_ISO8601_MAX];
        sf_format_iso8601(sf_clock_now_ms(), when, sizeof when);
        printf("%-24s %10" PRIu64 " %9" PRIu64 " %7" PRIu64 " %4d/%-3d  %s\n", when,
               now.ids - before.ids, now.failovers - before.failovers,
               now.errors - before.errors, now.servers_up, now.servers, last_error);
        fflush(stdout);
        last_error[0] = '\0';
        before = now;
    }
    return errors_total > 0 ? CLI_RPC_EXIT_UNREACHABLE : CLI_RPC_EXIT_OK;
}

int cli_rpc_main(int argc, char **argv)
{
    cli_rpc_options opts = {
        .host = CLI_RPC_DEFAULT_HOST,
        .port = CLI_RPC_DEFAULT_PORT,
        .timeout_ms = CLI_RPC_DEFAULT_TIMEOUT_MS,
        .agent = CLI_RPC_DEFAULT_AGENT,
    };
    int rc = cli_rpc_parse(argc, argv, &opts);
    if (rc != CLI_RPC_EXIT_OK)
        return rc;
    char one[SFC_SERVER_MAX + 8];
    bool v6 = strchr(opts.host, ':') != NULL;
    snprintf(one, sizeof one, v6 ? "[%s]:%d" : "%s:%d", opts.host, opts.port);
    sfc_options o;
    sfc_options_init(&o);
    o.servers = opts.zookeeper != NULL ? NULL : opts.servers != NULL ? opts.servers : one;
    o.zookeeper_hosts = opts.zookeeper;
    if (opts.zookeeper_path != NULL)
        o.worker_id_path = opts.zookeeper_path;
    o.agent = opts.agent;
    o.timeout_ms = opts.timeout_ms;
    o.try_timeout_ms = opts.timeout_ms / 4 > 0 ? opts.timeout_ms / 4 : 1;
    o.prefetch = opts.prefetch;
    sfc_set_zookeeper_logging(false);
    sfc_error err;
    sfc_client *c = sfc_open(&o, &err);
    if (c == NULL)
        return cli_rpc_failed(&err);
    if (strcmp(opts.command, "info") == 0)
        rc = cli_rpc_info(c);
    else if (strcmp(opts.command, "watch") == 0)
        rc = cli_rpc_watch(c, &opts);
    else
        rc = cli_rpc_ids(c, &opts);
    sfc_close(c);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "snowflake: cannot write the result: %s\n", strerror(errno));
        return CLI_RPC_EXIT_UNREACHABLE;
    }
    return rc;
}
