/* cli_rpc.c -- `snowflake id`, `ids N` and `info`: ask a running snowflaked
 * through the generated Thrift client (framed transport, binary protocol). */
#define _POSIX_C_SOURCE 200809L
#include "cli_rpc.h"
#include "rpc/client.h"

#include "lib/snowflake.h"
#include "rpc/thrift_fix.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <glib-object.h>

#include "sf_thrift_snowflake.h"

/* What the command line asked for. */
typedef struct cli_rpc_options {
    const char *host;
    int port;
    int timeout_ms;
    const char *agent;
    const char *command;
    int count; /* ids N */
} cli_rpc_options;


void cli_rpc_usage(FILE *out)
{
    fprintf(out,
            "  [CONNECTION] id [--agent A]\n"
            "                 ask a running snowflaked for one id\n"
            "  [CONNECTION] ids N [--agent A]\n"
            "                 ask for N ids (1..%d; the server's max_batch_size may be lower)\n"
            "  [CONNECTION] info\n"
            "                 print the server's worker id, datacenter id, time (ISO-8601 UTC\n"
            "                 and Unix ms) and that time's skew from the local clock in ms\n"
            "\n"
            "Connection options (before the command):\n"
            "  --host H       server address (default %s)\n"
            "  --port P       server port 1..65535 (default %d)\n"
            "  --timeout-ms T bound the connect and each reply by T ms, 1..600000 (default %d)\n"
            "Option of id and ids:\n"
            "  --agent A      the user agent sent (default %s); the server accepts a\n"
            "                 letter followed by letters, digits and '-'\n"
            "\n"
            "The id, ids and info commands exit 1 when the server refuses the request,\n"
            "2 on bad arguments and 3 when the server cannot be reached or does not answer.\n",
            CLI_RPC_MAX_IDS, CLI_RPC_DEFAULT_HOST, CLI_RPC_DEFAULT_PORT,
            CLI_RPC_DEFAULT_TIMEOUT_MS, CLI_RPC_DEFAULT_AGENT);
}

bool cli_rpc_handles(const char *arg)
{
    static const char *const words[] = { "id", "ids", "info", "--host", "--port", "--timeout-ms" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        if (strncmp(arg, words[i], n) == 0 && (arg[n] == '\0' || (arg[0] == '-' && arg[n] == '=')))
            return true;
    }
    return false;
}

/* Parses a decimal integer in [min, max]; false on junk, overflow or range. */
static bool cli_rpc_parse_int(const char *s, long min, long max, int *out)
{
    char *end;
    errno = 0;
    if (*s == '\0')
        return false;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
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

/* Fills opts from argv; returns CLI_RPC_EXIT_OK or CLI_RPC_EXIT_USAGE after
 * naming the bad argument and its allowed range. */
static int cli_rpc_parse(int argc, char **argv, cli_rpc_options *opts)
{
    const char *v;
    bool have_count = false, have_agent = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (cli_rpc_is_option(arg, "--host")) {
            if ((v = cli_rpc_option_value(argc, argv, &i, "--host")) == NULL)
                return CLI_RPC_EXIT_USAGE;
            if (*v == '\0') {
                fprintf(stderr, "snowflake: --host is empty: expected a host name or address\n");
                return CLI_RPC_EXIT_USAGE;
            }
            opts->host = v;
        } else if (cli_rpc_is_option(arg, "--port")) {
            if ((v = cli_rpc_option_value(argc, argv, &i, "--port")) == NULL)
                return CLI_RPC_EXIT_USAGE;
            if (!cli_rpc_parse_int(v, 1, 65535, &opts->port)) {
                fprintf(stderr, "snowflake: --port '%s' is not valid: allowed 1..65535\n", v);
                return CLI_RPC_EXIT_USAGE;
            }
        } else if (cli_rpc_is_option(arg, "--timeout-ms")) {
            if ((v = cli_rpc_option_value(argc, argv, &i, "--timeout-ms")) == NULL)
                return CLI_RPC_EXIT_USAGE;
            if (!cli_rpc_parse_int(v, 1, 600000, &opts->timeout_ms)) {
                fprintf(stderr, "snowflake: --timeout-ms '%s' is not valid: allowed 1..600000\n", v);
                return CLI_RPC_EXIT_USAGE;
            }
        } else if (cli_rpc_is_option(arg, "--agent")) {
            if ((v = cli_rpc_option_value(argc, argv, &i, "--agent")) == NULL)
                return CLI_RPC_EXIT_USAGE;
            opts->agent = v;
            have_agent = true;
        } else if (opts->command == NULL &&
                   (strcmp(arg, "id") == 0 || strcmp(arg, "ids") == 0 || strcmp(arg, "info") == 0)) {
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
    if (opts->command == NULL) {
        fprintf(stderr, "snowflake: no command given: expected id, ids N or info\n");
        return CLI_RPC_EXIT_USAGE;
    }
    if (strcmp(opts->command, "info") == 0 && have_agent) {
        fprintf(stderr, "snowflake: --agent applies to id and ids only, not info\n");
        return CLI_RPC_EXIT_USAGE;
    }
    if (strcmp(opts->command, "ids") == 0 && !have_count) {
        fprintf(stderr, "snowflake: ids needs a count: allowed 1..%d\n", CLI_RPC_MAX_IDS);
        return CLI_RPC_EXIT_USAGE;
    }
    return CLI_RPC_EXIT_OK;
}

/* Connects within the timeout and bounds every later read and write by it, so
 * a host that never answers or a server that never replies cannot hang the tool. False after printing
 * "cannot connect to HOST:PORT: reason". */
static bool cli_rpc_open(sf_client *conn, const cli_rpc_options *opts)
{
    char why[256];
    if (!sf_client_open(conn, opts->host, opts->port, opts->timeout_ms, why, sizeof why)) {
        fprintf(stderr, "snowflake: cannot connect to %s:%d: %s\n", opts->host, opts->port, why);
        return false;
    }
    return true;
}

/* Reports a call that failed without a declared exception: a broken
 * connection, a timeout, or a server-side application error. */
static int cli_rpc_call_failed(const cli_rpc_options *opts, const char *method, int64_t started_ms,
                               GError *error)
{
    int64_t waited = sf_clock_now_ms() - started_ms;
    const char *why = error != NULL ? error->message : "unknown error";
    if (waited >= opts->timeout_ms)
        fprintf(stderr, "snowflake: %s:%d did not answer %s within %d ms (%s)\n", opts->host,
                opts->port, method, opts->timeout_ms, why);
    else
        fprintf(stderr, "snowflake: %s to %s:%d failed: %s\n", method, opts->host, opts->port, why);
    return CLI_RPC_EXIT_UNREACHABLE;
}

/* Prints the first declared exception the server sent and frees all of them;
 * returns true if there was one. Every exception type has a message field. */
#define CLI_RPC_REPORT(ex, label)                                                                  \
    do {                                                                                           \
        if ((ex) != NULL) {                                                                        \
            if (!reported)                                                                         \
                fprintf(stderr, "snowflake: server refused the request: %s: %s\n", label,         \
                        (ex)->message != NULL ? (ex)->message : "");                               \
            reported = true;                                                                       \
            g_object_unref(ex);                                                                    \
        }                                                                                          \
    } while (0)

/* `snowflake id`: one id on one line. */
static int cli_rpc_id(sf_client *conn, const cli_rpc_options *opts)
{
    SfThriftInvalidSystemClock *clock_error = NULL;
    SfThriftInvalidUserAgentError *agent_error = NULL;
    SfThriftServiceUnavailable *unavailable = NULL;
    GError *error = NULL;
    gint64 id = 0;
    int64_t started = sf_clock_now_ms();
    if (sf_thrift_snowflake_if_get_id(conn->api, &id, opts->agent, &clock_error, &agent_error,
                                      &unavailable, &error)) {
        printf("%" PRId64 "\n", (int64_t)id);
        return CLI_RPC_EXIT_OK;
    }
    bool reported = false;
    CLI_RPC_REPORT(clock_error, "InvalidSystemClock");
    CLI_RPC_REPORT(agent_error, "InvalidUserAgentError");
    CLI_RPC_REPORT(unavailable, "ServiceUnavailable");
    if (reported) {
        g_clear_error(&error);
        return CLI_RPC_EXIT_REFUSED;
    }
    int rc = cli_rpc_call_failed(opts, "get_id", started, error);
    g_clear_error(&error);
    return rc;
}

/* `snowflake ids N`: N ids, one per line, in the server's order. */
static int cli_rpc_ids(sf_client *conn, const cli_rpc_options *opts)
{
    SfThriftInvalidSystemClock *clock_error = NULL;
    SfThriftInvalidUserAgentError *agent_error = NULL;
    SfThriftInvalidRequestError *request_error = NULL;
    SfThriftServiceUnavailable *unavailable = NULL;
    GError *error = NULL;
    GArray *ids = g_array_new(FALSE, FALSE, sizeof(gint64));
    int64_t started = sf_clock_now_ms();
    if (sf_thrift_snowflake_if_get_ids(conn->api, &ids, opts->agent, opts->count, &clock_error,
                                       &agent_error, &request_error, &unavailable, &error)) {
        int rc = CLI_RPC_EXIT_OK;
        if (ids->len != (guint)opts->count) {
            fprintf(stderr, "snowflake: asked %s:%d for %d ids but got %u\n", opts->host,
                    opts->port, opts->count, ids->len);
            rc = CLI_RPC_EXIT_UNREACHABLE;
        }
        for (guint i = 0; i < ids->len; i++)
            printf("%" PRId64 "\n", (int64_t)g_array_index(ids, gint64, i));
        g_array_unref(ids);
        return rc;
    }
    g_array_unref(ids);
    bool reported = false;
    CLI_RPC_REPORT(clock_error, "InvalidSystemClock");
    CLI_RPC_REPORT(agent_error, "InvalidUserAgentError");
    CLI_RPC_REPORT(request_error, "InvalidRequestError");
    CLI_RPC_REPORT(unavailable, "ServiceUnavailable");
    if (reported) {
        g_clear_error(&error);
        return CLI_RPC_EXIT_REFUSED;
    }
    int rc = cli_rpc_call_failed(opts, "get_ids", started, error);
    g_clear_error(&error);
    return rc;
}

/* `snowflake info`: the server's ids and clock. The skew compares the
 * server's time with the midpoint of the local clock around the call, so the
 * round trip does not count as skew. */
static int cli_rpc_info(sf_client *conn, const cli_rpc_options *opts)
{
    GError *error = NULL;
    gint64 worker_id = 0, datacenter_id = 0, server_ms = 0;
    int64_t started = sf_clock_now_ms();
    if (!sf_thrift_snowflake_if_get_worker_id(conn->api, &worker_id, &error))
        goto failed;
    if (!sf_thrift_snowflake_if_get_datacenter_id(conn->api, &datacenter_id, &error))
        goto failed;
    int64_t before = sf_clock_now_ms();
    if (!sf_thrift_snowflake_if_get_timestamp(conn->api, &server_ms, &error))
        goto failed;
    int64_t after = sf_clock_now_ms();
    char when[SF_ISO8601_MAX];
    sf_format_iso8601(server_ms, when, sizeof when);
    printf("server          %s:%d\n", opts->host, opts->port);
    printf("worker_id       %" PRId64 "\n", (int64_t)worker_id);
    printf("datacenter_id   %" PRId64 "\n", (int64_t)datacenter_id);
    printf("server_time     %s\n", when);
    printf("server_time_ms  %" PRId64 "\n", (int64_t)server_ms);
    printf("skew_ms         %" PRId64 "\n", (int64_t)server_ms - (before + (after - before) / 2));
    printf("round_trip_ms   %" PRId64 "\n", after - before);
    return CLI_RPC_EXIT_OK;
failed:;
    int rc = cli_rpc_call_failed(opts, "info", started, error);
    g_clear_error(&error);
    return rc;
}

int cli_rpc_main(int argc, char **argv)
{
    cli_rpc_options opts = {
        .host = CLI_RPC_DEFAULT_HOST,
        .port = CLI_RPC_DEFAULT_PORT,
        .timeout_ms = CLI_RPC_DEFAULT_TIMEOUT_MS,
        .agent = CLI_RPC_DEFAULT_AGENT,
    };
    sf_thrift_fix_transport(); /* a reset peer fails the call with the send's error */
    int rc = cli_rpc_parse(argc, argv, &opts);
    if (rc != CLI_RPC_EXIT_OK)
        return rc;
    /* A server that closes the connection must give an error, not kill the tool. */
    signal(SIGPIPE, SIG_IGN);
    sf_client conn;
    if (!cli_rpc_open(&conn, &opts))
        return CLI_RPC_EXIT_UNREACHABLE;
    if (strcmp(opts.command, "id") == 0)
        rc = cli_rpc_id(&conn, &opts);
    else if (strcmp(opts.command, "ids") == 0)
        rc = cli_rpc_ids(&conn, &opts);
    else
        rc = cli_rpc_info(&conn, &opts);
    sf_client_close(&conn);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "snowflake: cannot write the result: %s\n", strerror(errno));
        return CLI_RPC_EXIT_UNREACHABLE;
    }
    return rc;
}
