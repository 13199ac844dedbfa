/* cli_ids.h -- the `snowflake` tool's commands that work on ids without a server: range (the
 * ids of a time range), compose (an id from its fields) and encode (short string forms), and
 * reading an id in any of those forms for decode. */
#ifndef CLI_IDS_H
#define CLI_IDS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/snowflake.h"

/* True if cmd is one of range, compose, encode. */
bool cli_ids_handles(const char *cmd);

/* Runs `snowflake COMMAND ARGS...` (argv[0] is the command) and returns the exit status:
 * 0, 1 when an input could not be converted (after the good ones), 2 on bad arguments. */
int cli_ids_main(int argc, char **argv);

/* Writes these commands' part of `snowflake --help`. */
void cli_ids_usage(FILE *out);

/* Reads an id written in base; false (after saying why on standard error, naming the input
 * and what is allowed) when it is not one. */
bool cli_ids_parse(const char *text, sf_id_base base, int64_t *id);

/* Reads --epoch; false (after saying why) when it is not ms 0..SF_MAX_EPOCH_MS. */
bool cli_ids_parse_epoch(const char *text, int64_t *epoch);

/* True when getopt's answer c was an unknown option that is a negative number ("-5"): an
 * id to be refused as one (exit 1), not a usage error (exit 2). */
bool cli_ids_negative_arg(int c);

#endif /* CLI_IDS_H */
