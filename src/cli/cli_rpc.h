/* cli_rpc.h -- the `snowflake` tool's commands that ask a running snowflaked
 * over Thrift: id, ids and info. */
#ifndef CLI_RPC_H
#define CLI_RPC_H

#include <stdbool.h>
#include <stdio.h>

/* Exit statuses of the RPC commands. */
enum {
    CLI_RPC_EXIT_OK = 0,
    CLI_RPC_EXIT_REFUSED = 1,     /* the server answered with an error */
    CLI_RPC_EXIT_USAGE = 2,       /* bad arguments; the message names the allowed range */
    CLI_RPC_EXIT_UNREACHABLE = 3, /* no connection, a timeout, or a broken answer */
};

#define CLI_RPC_DEFAULT_HOST "127.0.0.1"
#define CLI_RPC_DEFAULT_PORT 7609
#define CLI_RPC_DEFAULT_TIMEOUT_MS 5000
#define CLI_RPC_DEFAULT_AGENT "snowflake-cli"
#define CLI_RPC_MAX_IDS 1000000

/* True if argv[1] starts an RPC command line: one of the commands, or one of
 * the connection options that precede them. */
bool cli_rpc_handles(const char *arg);

/* Runs `snowflake [--host H] [--port P] [--timeout-ms T] COMMAND ...` and
 * returns the process exit status (CLI_RPC_EXIT_*). Results go to stdout,
 * errors to stderr. */
int cli_rpc_main(int argc, char **argv);

/* Writes the RPC commands' part of `snowflake --help`. */
void cli_rpc_usage(FILE *out);

#endif /* CLI_RPC_H */
