/* config.h -- snowflaked's settings: one struct, filled from the key file, then
 * SNOWFLAKE_<KEY> environment variables, then command-line flags, and
 * validated in one place before anything is bound or registered. */
#ifndef SF_CONFIG_H
#define SF_CONFIG_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/audit_options.h"
#include "common/handler_options.h"
#include "common/http_options.h"
#include "common/registry_options.h"
#include "common/server_options.h"

#define SF_CONFIG_ERROR (sf_config_error_quark())
GQuark sf_config_error_quark(void);

typedef enum {
    SF_CONFIG_ERROR_FILE,  /* the file cannot be read or parsed */
    SF_CONFIG_ERROR_VALUE, /* a key holds a value outside its allowed set */
    SF_CONFIG_ERROR_USAGE, /* a bad command-line flag */
} sf_config_error_code;

typedef struct sf_config {
    char *config_file;                /* NULL = built-in defaults only */

    /* [snowflake] -- the original's keys first */
    int64_t datacenter_id;            /* 0..31 */
    int64_t worker_id;                /* 0..31; -1 when worker_id = auto */
    bool worker_id_auto;
    int64_t startup_sleep_ms;         /* 0..600000, default 0 */
    /* The server's and the handler's settings, with their modules' defaults and ranges:
     * server_port, thrift_server_threads, event_loop, bind_address (a string this struct owns),
     * max_frame_size, max_connections, idle_timeout_ms, frame_timeout_ms,
     * write_timeout_ms, max_output_buffer; max_batch_size, max_useragent_length,
     * max_tracked_useragents. */
    sf_server_options server;
    sf_handler_options handler;
    /* The registry's settings, with its defaults and ranges: [zookeeper] hosts ("" =
     * standalone), session_timeout_ms, auth ("user:password", "" = none), claim_retries,
     * claim_retry_wait_ms, state_interval_ms; [snowflake] worker_id_path,
     * skip_sanity_checks, skip_unreachable_peers. Its strings are owned here. */
    sf_registry_options registry;
    int64_t start_timeout_s;          /* [zookeeper] 0..86400, default 300; 0 = for ever */
    /* ours */
    bool listen_while_not_serving;    /* default false: the port is open only while serving */
    int64_t epoch_ms;                 /* default 1288834974657 */
    int64_t max_clock_backward_wait_ms; /* 0..60000, default 0 */
    bool random_first_sequence;       /* default false */
    char *log_level;                  /* error|warning|info|debug, default info */

    /* [http] -- the HTTP ids port, with its module's defaults and ranges: port (0 = off),
     * bind_address (a string this struct owns), threads, max_connections, idle_timeout_ms,
     * request_timeout_ms, max_request_size, max_output_buffer, keep_alive. */
    sf_http_options http;

    /* [admin] */
    int admin_port;                   /* 0..65535, default 9990; 0 = disabled */
    char *admin_bind_address;         /* default 127.0.0.1 */

    /* [audit] */
    char *audit_sink;                 /* none|scribe|file, default none; audit.sink follows it */
    /* The audit log's other settings, with its defaults and ranges: scribe_host,
     * scribe_port, category, socket_timeout_ms, batch_size, queue_size, file. Its strings
     * are owned here. */
    sf_audit_options audit;
} sf_config;

/* Sets every field to its default. */
void sf_config_init(sf_config *cfg);

/* Fills cfg from argv: --config FILE (or -c) is read first, then SNOWFLAKE_<KEY>
 * environment variables override it, then the other flags override both.
 * Consumes the flags it knows from argc/argv. Returns FALSE with *error set,
 * naming the key and the allowed values, on any bad input. --help prints
 * usage and sets *help_shown. */
gboolean sf_config_load(sf_config *cfg, int *argc, char ***argv, gboolean *help_shown,
                        GError **error);

/* Applies the keys of a key file held in memory (data, len); source names it
 * in messages. sf_config_load() reads --config files through this. */
gboolean sf_config_load_data(sf_config *cfg, const char *data, size_t len, const char *source,
                             GError **error);

/* Checks the rules that span keys (each key's own range is checked as it is
 * read); the message names the key and its allowed values. */
gboolean sf_config_validate(const sf_config *cfg, GError **error);

/* Calls fn for every key, in the table's order, with its group and name, what it
 * allows (as --help says it) and its value in cfg as the key file would spell it. */
typedef void (*sf_config_key_fn)(const char *group, const char *name, const char *allowed,
                                 const char *value, void *ctx);
void sf_config_foreach_key(const sf_config *cfg, sf_config_key_fn fn, void *ctx);

/* Frees the strings cfg owns. */
void sf_config_clear(sf_config *cfg);

#endif /* SF_CONFIG_H */
