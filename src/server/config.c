/* config.c -- reads snowflaked's settings from a GLib key file, SNOWFLAKE_*
 * environment variables and flags, in that order, through one table of keys.
 *
 * Every value, whatever its source, goes through sf_config_set_value(), so a
 * bad value is refused the same way everywhere: naming the key, the value,
 * where it came from and what is allowed. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "lib/snowflake.h"
#include "common/zkpath.h"

G_DEFINE_QUARK(sf-config-error-quark, sf_config_error)

typedef enum {
    SF_KEY_INT,       /* an int field, min..max */
    SF_KEY_INT64,     /* an int64_t field, min..max */
    SF_KEY_BOOL,
    SF_KEY_STRING,
    SF_KEY_WORKER_ID, /* 0..31 or "auto" */
    SF_KEY_LEVEL,     /* one of sf_log_levels */
    SF_KEY_ADDRESS,   /* an IPv4 or IPv6 literal */
    SF_KEY_LOOP,      /* an sf_server_loop by name */
} sf_key_type;

typedef struct sf_key {
    const char *group;
    const char *name;
    sf_key_type type;
    size_t offset;
    int64_t min, max;
} sf_key;

#define SF_FIELD(f) offsetof(sf_config, f)
/* A row for an integer setting module MODULE owns, in group: its range is the one the module
 * states (SF_<MODULE>_MIN_<field> .. SF_<MODULE>_MAX_<field>). */
#define SF_MODULE_KEY(group, name, member, MODULE, field)                                   \
    { group, name, SF_KEY_INT, SF_FIELD(member.field), SF_##MODULE##_MIN_##field,            \
      SF_##MODULE##_MAX_##field }
#define SF_SERVER_KEY(name, field) SF_MODULE_KEY("snowflake", name, server, SERVER, field)
#define SF_HANDLER_KEY(name, field) SF_MODULE_KEY("snowflake", name, handler, HANDLER, field)
#define SF_REGISTRY_KEY(name, field) SF_MODULE_KEY("zookeeper", name, registry, REGISTRY, field)
#define SF_AUDIT_KEY(name, field) SF_MODULE_KEY("audit", name, audit, AUDIT, field)
#define SF_HTTP_KEY(field, lo, hi, dflt) SF_MODULE_KEY("http", #field, http, HTTP, field),

/* Every key the file may hold. Names the original had keep its spelling. */
static const sf_key sf_keys[] = {
    { "snowflake", "datacenter_id", SF_KEY_INT64, SF_FIELD(datacenter_id), 0, SF_MAX_DATACENTER_ID },
    { "snowflake", "worker_id", SF_KEY_WORKER_ID, SF_FIELD(worker_id), 0, SF_MAX_WORKER_ID },
    SF_SERVER_KEY("server_port", port),
    SF_SERVER_KEY("thrift_server_threads", threads),
    { "snowflake", "event_loop", SF_KEY_LOOP, SF_FIELD(server.event_loop), 0, 0 },
    { "snowflake", "skip_sanity_checks", SF_KEY_BOOL, SF_FIELD(registry.skip_sanity_checks),
      0, 1 },
    { "snowflake", "skip_unreachable_peers", SF_KEY_BOOL,
      SF_FIELD(registry.skip_unreachable_peers), 0, 1 },
    { "snowflake", "startup_sleep_ms", SF_KEY_INT64, SF_FIELD(startup_sleep_ms), 0, 600000 },
    { "snowflake", "worker_id_path", SF_KEY_STRING, SF_FIELD(registry.worker_id_path), 0, 0 },
    { "snowflake", "bind_address", SF_KEY_ADDRESS, SF_FIELD(server.bind_address), 0, 0 },
    { "snowflake", "listen_while_not_serving", SF_KEY_BOOL, SF_FIELD(listen_while_not_serving),
      0, 1 },
    { "snowflake", "epoch_ms", SF_KEY_INT64, SF_FIELD(epoch_ms), 0, SF_MAX_EPOCH_MS },
    { "snowflake", "max_clock_backward_wait_ms", SF_KEY_INT64,
      SF_FIELD(max_clock_backward_wait_ms), 0, 60000 },
    { "snowflake", "random_first_sequence", SF_KEY_BOOL, SF_FIELD(random_first_sequence), 0, 1 },
    SF_HANDLER_KEY("max_batch_size", max_batch_size),
    SF_HANDLER_KEY("max_useragent_length", max_useragent_length),
    SF_HANDLER_KEY("max_tracked_useragents", max_tracked_useragents),
    SF_SERVER_KEY("max_frame_size", max_frame_size),
    SF_SERVER_KEY("max_connections", max_connections),
    SF_SERVER_KEY("idle_timeout_ms", idle_timeout_ms),
    SF_SERVER_KEY("frame_timeout_ms", frame_timeout_ms),
    SF_SERVER_KEY("write_timeout_ms", write_timeout_ms),
    SF_SERVER_KEY("max_output_buffer", max_output_buffer),
    { "snowflake", "log_level", SF_KEY_LEVEL, SF_FIELD(log_level), 0, 0 },
    { "zookeeper", "hosts", SF_KEY_STRING, SF_FIELD(registry.hosts), 0, 0 },
    SF_REGISTRY_KEY("session_timeout_ms", session_timeout_ms),
    { "zookeeper", "start_timeout_s", SF_KEY_INT64, SF_FIELD(start_timeout_s), 0, 86400 },
    { "zookeeper", "auth", SF_KEY_STRING, SF_FIELD(registry.auth), 0, 0 },
    SF_REGISTRY_KEY("claim_retries", claim_retries),
    SF_REGISTRY_KEY("claim_retry_wait_ms", claim_retry_wait_ms),
    SF_REGISTRY_KEY("state_interval_ms", state_interval_ms),
    SF_REGISTRY_KEY("max_peer_skew_ms", max_peer_skew_ms),
    SF_HTTP_INT_OPTIONS(SF_HTTP_KEY)
    { "http", "bind_address", SF_KEY_ADDRESS, SF_FIELD(http.bind_address), 0, 0 },
    { "http", "keep_alive", SF_KEY_BOOL, SF_FIELD(http.keep_alive), 0, 1 },
    { "admin", "http_port", SF_KEY_INT, SF_FIELD(admin_port), 0, 65535 },
    { "admin", "bind_address", SF_KEY_ADDRESS, SF_FIELD(admin_bind_address), 0, 0 },
    { "audit", "sink", SF_KEY_STRING, SF_FIELD(audit_sink), 0, 0 },
    { "audit", "scribe_host", SF_KEY_STRING, SF_FIELD(audit.scribe_host), 0, 0 },
    SF_AUDIT_KEY("scribe_port", scribe_port),
    { "audit", "category", SF_KEY_STRING, SF_FIELD(audit.category), 0, 0 },
    SF_AUDIT_KEY("socket_timeout_ms", socket_timeout_ms),
    SF_AUDIT_KEY("batch_size", batch_size),
    SF_AUDIT_KEY("queue_size", queue_size),
    { "audit", "file", SF_KEY_STRING, SF_FIELD(audit.file), 0, 0 },
};

static const char *const sf_log_levels[] = { "error", "warning", "info", "debug", NULL };

void sf_config_init(sf_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->datacenter_id = 0;
    cfg->worker_id = 0;
    sf_server_options_init(&cfg->server);
    cfg->server.bind_address = g_strdup(cfg->server.bind_address); /* owned, as every string */
    sf_handler_options_init(&cfg->handler);
    cfg->startup_sleep_ms = 0;
    cfg->start_timeout_s = 300;
    cfg->epoch_ms = SF_TWITTER_EPOCH_MS;
    cfg->log_level = g_strdup("info");
    sf_registry_options_init(&cfg->registry);
    cfg->registry.hosts = g_strdup(""); /* standalone */
    cfg->registry.worker_id_path = g_strdup(cfg->registry.worker_id_path);
    cfg->registry.auth = g_strdup("");
    sf_http_options_init(&cfg->http);
    cfg->http.bind_address = g_strdup(cfg->http.bind_address);
    cfg->admin_port = 9990;
    cfg->admin_bind_address = g_strdup("127.0.0.1");
    cfg->audit_sink = g_strdup("none");
    sf_audit_options_init(&cfg->audit);
    cfg->audit.scribe_host = g_strdup(cfg->audit.scribe_host);
    cfg->audit.category = g_strdup(cfg->audit.category);
    cfg->audit.file = g_strdup("");
}

void sf_config_clear(sf_config *cfg)
{
    g_free(cfg->config_file);
    for (size_t i = 0; i < G_N_ELEMENTS(sf_keys); i++)
        if (sf_keys[i].type == SF_KEY_STRING || sf_keys[i].type == SF_KEY_LEVEL ||
            sf_keys[i].type == SF_KEY_ADDRESS)
            g_free(*(char **)((char *)cfg + sf_keys[i].offset));
    memset(cfg, 0, sizeof *cfg);
}

static const sf_key *sf_config_find_key(const char *group, const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(sf_keys); i++)
        if (strcmp(sf_keys[i].group, group) == 0 && strcmp(sf_keys[i].name, name) == 0)
            return &sf_keys[i];
    return NULL;
}

/* Describes what a key allows, for error messages and --help. */
static char *sf_config_allowed(const sf_key *k)
{
    switch (k->type) {
    case SF_KEY_INT:
    case SF_KEY_INT64:
        return g_strdup_printf("an integer %" G_GINT64_FORMAT "..%" G_GINT64_FORMAT, k->min, k->max);
    case SF_KEY_BOOL:
        return g_strdup("true or false");
    case SF_KEY_WORKER_ID:
        return g_strdup_printf("an integer 0..%d or auto", SF_MAX_WORKER_ID);
    case SF_KEY_LEVEL:
        return g_strdup("error, warning, info or debug");
    case SF_KEY_ADDRESS:
        return g_strdup("an IPv4 or IPv6 address, e.g. 0.0.0.0, 127.0.0.1 or ::");
    case SF_KEY_LOOP:
        return g_strdup("auto, epoll or io_uring");
    case SF_KEY_STRING:
    default:
        return g_strdup("a string");
    }
}

static gboolean sf_config_bad_value(const sf_key *k, const char *value, const char *source,
                                    GError **error)
{
    char *allowed = sf_config_allowed(k);
    g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE,
                "[%s] %s = '%s' (from %s) is not valid: allowed %s", k->group, k->name, value,
                source, allowed);
    g_free(allowed);
    return FALSE;
}

static gboolean sf_config_parse_int(const sf_key *k, const char *value, int64_t *out)
{
    gint64 v;
    if (!g_ascii_string_to_signed(value, 10, k->min, k->max, &v, NULL))
        return FALSE;
    *out = v;
    return TRUE;
}

/* Sets one key from its textual value; source names where it came from. */
static gboolean sf_config_set_value(sf_config *cfg, const sf_key *k, const char *raw,
                                    const char *source, GError **error)
{
    void *field = (char *)cfg + k->offset;
    char *value = g_strstrip(g_strdup(raw));
    gboolean ok = TRUE;
    int64_t n;
    struct in6_addr addr6;
    struct in_addr addr4;

    switch (k->type) {
    case SF_KEY_INT:
        if ((ok = sf_config_parse_int(k, value, &n)))
            *(int *)field = (int)n;
        break;
    case SF_KEY_INT64:
        if ((ok = sf_config_parse_int(k, value, &n)))
            *(int64_t *)field = n;
        break;
    case SF_KEY_BOOL:
        if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0)
            *(bool *)field = true;
        else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0)
            *(bool *)field = false;
        else
            ok = FALSE;
        break;
    case SF_KEY_WORKER_ID:
        if (strcmp(value, "auto") == 0) {
            cfg->worker_id_auto = true;
            cfg->worker_id = -1;
        } else if ((ok = sf_config_parse_int(k, value, &n))) {
            cfg->worker_id_auto = false;
            cfg->worker_id = n;
        }
        break;
    case SF_KEY_LEVEL:
        ok = g_strv_contains(sf_log_levels, value);
        if (ok) {
            g_free(*(char **)field);
            *(char **)field = g_strdup(value);
        }
        break;
    case SF_KEY_ADDRESS:
        ok = inet_pton(AF_INET, value, &addr4) == 1 || inet_pton(AF_INET6, value, &addr6) == 1;
        if (ok) {
            g_free(*(char **)field);
            *(char **)field = g_strdup(value);
        }
        break;
    case SF_KEY_LOOP:
        ok = sf_server_loop_from_name(value, (sf_server_loop *)field);
        break;
    case SF_KEY_STRING:
        g_free(*(char **)field);
        *(char **)field = g_strdup(value);
        break;
    }
    if (!ok)
        sf_config_bad_value(k, raw, source, error);
    g_free(value);
    return ok;
}

/* Applies every key of a parsed key file; an unknown group or key is an
 * error, since a misspelt key silently ignored would run the node on a default. */
static gboolean sf_config_apply_key_file(sf_config *cfg, GKeyFile *kf, const char *source,
                                         GError **error)
{
    gboolean ok = TRUE;
    char **groups = g_key_file_get_groups(kf, NULL);
    for (char **g = groups; ok && *g != NULL; g++) {
        char **keys = g_key_file_get_keys(kf, *g, NULL, NULL);
        for (char **key = keys; ok && keys != NULL && *key != NULL; key++) {
            const sf_key *k = sf_config_find_key(*g, *key);
            if (k == NULL) {
                g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE,
                            "%s: unknown key '%s' in group [%s] (see conf/snowflake.conf for "
                            "the keys)", source, *key, *g);
                ok = FALSE;
                break;
            }
            char *value = g_key_file_get_value(kf, *g, *key, NULL);
            ok = sf_config_set_value(cfg, k, value != NULL ? value : "", source, error);
            g_free(value);
        }
        g_strfreev(keys);
    }
    g_strfreev(groups);
    return ok;
}

gboolean sf_config_load_data(sf_config *cfg, const char *data, size_t len, const char *source,
                             GError **error)
{
    GKeyFile *kf = g_key_file_new();
    GError *local = NULL;
    gboolean ok = g_key_file_load_from_data(kf, data, len, G_KEY_FILE_NONE, &local);
    if (!ok) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_FILE, "cannot read config file %s: %s",
                    source, local->message);
        g_error_free(local);
    } else {
        ok = sf_config_apply_key_file(cfg, kf, source, error);
    }
    g_key_file_free(kf);
    return ok;
}

static gboolean sf_config_load_file(sf_config *cfg, const char *path, GError **error)
{
    char *data = NULL;
    gsize len = 0;
    GError *local = NULL;
    if (!g_file_get_contents(path, &data, &len, &local)) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_FILE, "cannot read config file %s: %s",
                    path, local->message);
        g_error_free(local);
        return FALSE;
    }
    gboolean ok = sf_config_load_data(cfg, data, len, path, error);
    g_free(data);
    return ok;
}

/* The environment variable for a key: SNOWFLAKE_<KEY> for [snowflake] keys,
 * SNOWFLAKE_<GROUP>_<KEY> for the others (SNOWFLAKE_ZOOKEEPER_HOSTS). */
static char *sf_config_env_name(const sf_key *k)
{
    char *name = strcmp(k->group, "snowflake") == 0
                     ? g_strdup_printf("SNOWFLAKE_%s", k->name)
                     : g_strdup_printf("SNOWFLAKE_%s_%s", k->group, k->name);
    char *upper = g_ascii_strup(name, -1);
    g_free(name);
    return upper;
}

static gboolean sf_config_load_env(sf_config *cfg, GError **error)
{
    for (size_t i = 0; i < G_N_ELEMENTS(sf_keys); i++) {
        char *name = sf_config_env_name(&sf_keys[i]);
        const char *value = g_getenv(name);
        gboolean ok = TRUE;
        if (value != NULL) {
            char *source = g_strdup_printf("environment variable %s", name);
            ok = sf_config_set_value(cfg, &sf_keys[i], value, source, error);
            g_free(source);
        }
        g_free(name);
        if (!ok)
            return FALSE;
    }
    return TRUE;
}

/* Flags, kept as text until the file and environment are applied. */
typedef struct sf_flags {
    char *config_file;
    char *worker_id;
    char *datacenter_id;
    char *port;
    char *bind;
    char *admin_port;
    char *http_port;
    char *zookeeper;
    char *log_level;
    char *threads;
    char **settings; /* --set group.key=value */
    gboolean help;
} sf_flags;

static void sf_flags_clear(sf_flags *f)
{
    g_free(f->config_file);
    g_free(f->worker_id);
    g_free(f->datacenter_id);
    g_free(f->port);
    g_free(f->bind);
    g_free(f->admin_port);
    g_free(f->http_port);
    g_free(f->zookeeper);
    g_free(f->log_level);
    g_free(f->threads);
    g_strfreev(f->settings);
}

/* Applies a --set group.key=value flag. */
static gboolean sf_config_apply_setting(sf_config *cfg, const char *setting, GError **error)
{
    const char *eq = strchr(setting, '=');
    const char *dot = strchr(setting, '.');
    if (eq == NULL || dot == NULL || dot > eq) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_USAGE,
                    "--set '%s' is not valid: expected GROUP.KEY=VALUE, e.g. "
                    "snowflake.max_batch_size=5000", setting);
        return FALSE;
    }
    char *group = g_strndup(setting, (gsize)(dot - setting));
    char *name = g_strndup(dot + 1, (gsize)(eq - dot - 1));
    const sf_key *k = sf_config_find_key(group, name);
    gboolean ok;
    if (k == NULL) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_USAGE,
                    "--set: unknown key '%s' in group [%s] (see conf/snowflake.conf for the keys)",
                    name, group);
        ok = FALSE;
    } else {
        ok = sf_config_set_value(cfg, k, eq + 1, "--set", error);
    }
    g_free(group);
    g_free(name);
    return ok;
}

static gboolean sf_config_apply_flags(sf_config *cfg, const sf_flags *f, GError **error)
{
    const struct {
        const char *value, *group, *key, *flag;
    } map[] = {
        { f->worker_id, "snowflake", "worker_id", "--worker-id" },
        { f->datacenter_id, "snowflake", "datacenter_id", "--datacenter-id" },
        { f->port, "snowflake", "server_port", "--port" },
        { f->bind, "snowflake", "bind_address", "--bind" },
        { f->threads, "snowflake", "thrift_server_threads", "--threads" },
        { f->log_level, "snowflake", "log_level", "--log-level" },
        { f->admin_port, "admin", "http_port", "--admin-port" },
        { f->http_port, "http", "port", "--http-port" },
        { f->zookeeper, "zookeeper", "hosts", "--zookeeper" },
    };
    for (size_t i = 0; i < G_N_ELEMENTS(map); i++)
        if (map[i].value != NULL &&
            !sf_config_set_value(cfg, sf_config_find_key(map[i].group, map[i].key),
                                 map[i].value, map[i].flag, error))
            return FALSE;
    for (char **s = f->settings; s != NULL && *s != NULL; s++)
        if (!sf_config_apply_setting(cfg, *s, error))
            return FALSE;
    return TRUE;
}

/* A key's value in cfg as the key file would spell it. */
static char *sf_config_value_text(const sf_config *cfg, const sf_key *k)
{
    const void *field = (const char *)cfg + k->offset;
    switch (k->type) {
    case SF_KEY_INT:
        return g_strdup_printf("%d", *(const int *)field);
    case SF_KEY_INT64:
        return g_strdup_printf("%" G_GINT64_FORMAT, *(const int64_t *)field);
    case SF_KEY_BOOL:
        return g_strdup(*(const bool *)field ? "true" : "false");
    case SF_KEY_LOOP:
        return g_strdup(sf_server_loop_name(*(const sf_server_loop *)field));
    case SF_KEY_WORKER_ID:
        return cfg->worker_id_auto ? g_strdup("auto")
                                   : g_strdup_printf("%" G_GINT64_FORMAT, cfg->worker_id);
    case SF_KEY_STRING:
    case SF_KEY_LEVEL:
    case SF_KEY_ADDRESS:
    default:
        return g_strdup(*(char *const *)field);
    }
}

void sf_config_foreach_key(const sf_config *cfg, sf_config_key_fn fn, void *ctx)
{
    for (size_t i = 0; i < G_N_ELEMENTS(sf_keys); i++) {
        char *allowed = sf_config_allowed(&sf_keys[i]);
        char *value = sf_config_value_text(cfg, &sf_keys[i]);
        fn(sf_keys[i].group, sf_keys[i].name, allowed, value, ctx);
        g_free(value);
        g_free(allowed);
    }
}

/* The key list for --help: every key, its environment variable and what it allows. */
static char *sf_config_describe_keys(void)
{
    GString *out = g_string_new(
        "Settings are read from the key file (-c), then SNOWFLAKE_* environment variables,\n"
        "then flags; later sources win. Keys (see conf/snowflake.conf for their meaning):\n");
    for (size_t i = 0; i < G_N_ELEMENTS(sf_keys); i++) {
        char *env = sf_config_env_name(&sf_keys[i]);
        char *allowed = sf_config_allowed(&sf_keys[i]);
        g_string_append_printf(out, "  [%s] %-27s %-43s %s\n", sf_keys[i].group,
                               sf_keys[i].name, env, allowed);
        g_free(allowed);
        g_free(env);
    }
    return g_string_free(out, FALSE);
}

gboolean sf_config_load(sf_config *cfg, int *argc, char ***argv, gboolean *help_shown,
                        GError **error)
{
    sf_flags f = { 0 };
    const GOptionEntry entries[] = {
        { "config", 'c', 0, G_OPTION_ARG_FILENAME, &f.config_file, "Read settings from FILE",
          "FILE" },
        { "worker-id", 0, 0, G_OPTION_ARG_STRING, &f.worker_id,
          "Worker id, 0..31 or auto ([snowflake] worker_id)", "N" },
        { "datacenter-id", 0, 0, G_OPTION_ARG_STRING, &f.datacenter_id,
          "Datacenter id, 0..31 ([snowflake] datacenter_id)", "N" },
        { "port", 'p', 0, G_OPTION_ARG_STRING, &f.port,
          "Thrift port, 0..65535, 0 = any free port ([snowflake] server_port)", "PORT" },
        { "bind", 'b', 0, G_OPTION_ARG_STRING, &f.bind,
          "Address to listen on ([snowflake] bind_address)", "ADDR" },
        { "threads", 't', 0, G_OPTION_ARG_STRING, &f.threads,
          "Server threads, 1..256 ([snowflake] thrift_server_threads)", "N" },
        { "admin-port", 0, 0, G_OPTION_ARG_STRING, &f.admin_port,
          "HTTP stats/health port, 0 = off ([admin] http_port)", "PORT" },
        { "http-port", 0, 0, G_OPTION_ARG_STRING, &f.http_port,
          "HTTP ids port (GET /id, /ids), 0 = off ([http] port)", "PORT" },
        { "zookeeper", 'z', 0, G_OPTION_ARG_STRING, &f.zookeeper,
          "ZooKeeper hosts, empty = standalone ([zookeeper] hosts)", "HOSTS" },
        { "log-level", 'l', 0, G_OPTION_ARG_STRING, &f.log_level,
          "error, warning, info or debug ([snowflake] log_level)", "LEVEL" },
        { "set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &f.settings,
          "Set any key, e.g. --set snowflake.max_batch_size=5000 (repeatable)",
          "GROUP.KEY=VALUE" },
        { "help", 'h', 0, G_OPTION_ARG_NONE, &f.help, "Show this help", NULL },
        { NULL, 0, 0, 0, NULL, NULL, NULL },
    };
    GOptionContext *ctx = g_option_context_new("- the Snowflake unique id server");
    g_option_context_set_help_enabled(ctx, FALSE);
    g_option_context_add_main_entries(ctx, entries, NULL);
    char *keys = sf_config_describe_keys();
    g_option_context_set_description(ctx, keys);
    g_free(keys);

    gboolean ok = TRUE;
    GError *local = NULL;
    if (help_shown != NULL)
        *help_shown = FALSE;
    if (!g_option_context_parse(ctx, argc, argv, &local)) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_USAGE, "%s (try --help)",
                    local->message);
        g_error_free(local);
        ok = FALSE;
    } else if (*argc > 1) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_USAGE,
                    "unexpected argument '%s' (try --help)", (*argv)[1]);
        ok = FALSE;
    } else if (f.help) {
        char *help = g_option_context_get_help(ctx, TRUE, NULL);
        fputs(help, stdout);
        g_free(help);
        if (help_shown != NULL)
            *help_shown = TRUE;
    } else {
        if (f.config_file != NULL) {
            g_free(cfg->config_file);
            cfg->config_file = g_strdup(f.config_file);
        }
        ok = (cfg->config_file == NULL || sf_config_load_file(cfg, cfg->config_file, error)) &&
             sf_config_load_env(cfg, error) && sf_config_apply_flags(cfg, &f, error) &&
             sf_config_validate(cfg, error);
    }
    sf_flags_clear(&f);
    g_option_context_free(ctx);
    return ok;
}

gboolean sf_config_validate(const sf_config *cfg, GError **error)
{
    if (cfg->worker_id_auto && cfg->registry.hosts[0] == '\0') {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE,
                    "[snowflake] worker_id = auto needs ZooKeeper: set [zookeeper] hosts, or "
                    "give a worker id 0..%d", SF_MAX_WORKER_ID);
        return FALSE;
    }
    const char *why = NULL;
    if (!sf_zkpath_valid(cfg->registry.worker_id_path, &why)) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE,
                    "[snowflake] worker_id_path = '%s' is not valid (%s): allowed an absolute "
                    "ZooKeeper path of at most %d bytes, not the root, without an empty, . "
                    "or .. component or a trailing slash, e.g. /snowflake-servers",
                    cfg->registry.worker_id_path, why, SF_ZKPATH_MAX);
        return FALSE;
    }
    if (!sf_registry_auth_valid(cfg->registry.auth)) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE,
                    "[zookeeper] auth is not valid: allowed user:password (digest "
                    "authentication), or empty for none");
        return FALSE;
    }
    if (cfg->epoch_ms > sf_clock_now_ms()) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE,
                    "[snowflake] epoch_ms = %" G_GINT64_FORMAT " is in the future: allowed a "
                    "time in ms before now (default %lld, Twitter's epoch)",
                    cfg->epoch_ms, (long long)SF_TWITTER_EPOCH_MS);
        return FALSE;
    }
    sf_audit_options audit = cfg->audit;
    char audit_error[256];
    if (!sf_audit_sink_from_name(cfg->audit_sink, &audit.sink)) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE,
                    "[audit] sink = '%s' is not valid: allowed none, scribe or file",
                    cfg->audit_sink);
        return FALSE;
    }
    if (!sf_audit_options_check(&audit, audit_error, sizeof audit_error)) {
        g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE, "%s", audit_error);
        return FALSE;
    }
    /* The listeners' ports: each one set its own (the Thrift port's 0 picks a free one). */
    const int ports[] = {cfg->server.port, cfg->admin_port, cfg->http.port};
    const char *const keys[] = {"[snowflake] server_port", "[admin] http_port", "[http] port"};
    for (int i = 1; i < 3; i++)
        for (int j = 0; j < i; j++)
            if (ports[i] != 0 && ports[i] == ports[j]) {
                g_set_error(error, SF_CONFIG_ERROR, SF_CONFIG_ERROR_VALUE, "%s = %d is the same "
                            "as %s: allowed another port, or 0 to turn it off", keys[i], ports[i],
                            keys[j]);
                return FALSE;
            }
    return TRUE;
}
