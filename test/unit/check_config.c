/* check_config.c -- snowflaked's settings: defaults, key file, environment,
 * flags, their order, and the messages that refuse bad values. */
#define _POSIX_C_SOURCE 200809L
#include "server/config.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char conf_path[] = "/tmp/check_config_XXXXXX";

static void write_conf(const char *text)
{
    int fd = mkstemp(conf_path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void remove_conf(void)
{
    unlink(conf_path);
    strcpy(conf_path, "/tmp/check_config_XXXXXX");
}

/* Loads from an argv given as a NULL-terminated list; returns the result. */
static gboolean load(sf_config *cfg, GError **error, ...)
{
    char *args[32];
    int n = 0;
    va_list ap;
    args[n++] = "snowflaked";
    va_start(ap, error);
    for (char *a; (a = va_arg(ap, char *)) != NULL && n < 31;)
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    char **argv = args;
    gboolean help = FALSE;
    sf_config_init(cfg);
    return sf_config_load(cfg, &n, &argv, &help, error);
}

static void assert_error(GError *error, const char *expect)
{
    ck_assert_ptr_nonnull(error);
    ck_assert_msg(strstr(error->message, expect) != NULL, "'%s' not in '%s'", expect,
                  error->message);
}

START_TEST(test_defaults)
{
    sf_config cfg;
    GError *error = NULL;
    ck_assert(load(&cfg, &error, NULL));
    ck_assert_int_eq(cfg.server.port, 7609);
    ck_assert_int_eq(cfg.datacenter_id, 0);
    ck_assert_int_eq(cfg.worker_id, 0);
    ck_assert_int_eq(cfg.epoch_ms, 1288834974657LL);
    ck_assert_int_eq(cfg.handler.max_batch_size, 10000);
    ck_assert_int_eq(cfg.server.max_frame_size, 65536);
    ck_assert_int_eq(cfg.handler.max_useragent_length, 255);
    ck_assert_int_eq(cfg.handler.max_tracked_useragents, 1000);
    ck_assert_int_eq(cfg.server.write_timeout_ms, 30000);
    ck_assert_int_eq(cfg.server.max_output_buffer, 33554432);
    ck_assert_int_eq(cfg.admin_port, 9990);
    ck_assert_str_eq(cfg.registry.worker_id_path, "/snowflake-servers");
    ck_assert_str_eq(cfg.registry.hosts, "");
    ck_assert(!cfg.random_first_sequence);
    ck_assert_int_eq(cfg.max_clock_backward_wait_ms, 0);
    sf_config_clear(&cfg);
}
END_TEST

START_TEST(test_file_then_env_then_flags)
{
    write_conf("[snowflake]\nworker_id = 3\ndatacenter_id = 4\nserver_port = 7000\n"
               "random_first_sequence = true\nlog_level = debug\n"
               "[zookeeper]\nhosts = 127.0.0.1:2181\n[admin]\nhttp_port = 0\n");
    setenv("SNOWFLAKE_DATACENTER_ID", "5", 1);
    setenv("SNOWFLAKE_SERVER_PORT", "7001", 1);
    sf_config cfg;
    GError *error = NULL;
    ck_assert_msg(load(&cfg, &error, "-c", conf_path, "--port", "7002", NULL), "%s",
                  error ? error->message : "");
    ck_assert_int_eq(cfg.worker_id, 3);     /* file */
    ck_assert_int_eq(cfg.datacenter_id, 5); /* environment over file */
    ck_assert_int_eq(cfg.server.port, 7002);/* flag over both */
    ck_assert(cfg.random_first_sequence);
    ck_assert_str_eq(cfg.log_level, "debug");
    ck_assert_str_eq(cfg.registry.hosts, "127.0.0.1:2181");
    ck_assert_int_eq(cfg.admin_port, 0);
    sf_config_clear(&cfg);
    unsetenv("SNOWFLAKE_DATACENTER_ID");
    unsetenv("SNOWFLAKE_SERVER_PORT");
    remove_conf();
}
END_TEST

START_TEST(test_worker_id_auto)
{
    sf_config cfg;
    GError *error = NULL;
    ck_assert(load(&cfg, &error, "--worker-id", "auto", "--zookeeper", "127.0.0.1:2181", NULL));
    ck_assert(cfg.worker_id_auto);
    ck_assert_int_eq(cfg.worker_id, -1);
    sf_config_clear(&cfg);
    ck_assert(!load(&cfg, &error, "--worker-id", "auto", NULL));
    assert_error(error, "worker_id = auto needs ZooKeeper");
    g_clear_error(&error);
    sf_config_clear(&cfg);
}
END_TEST

static const struct {
    const char *flag, *value, *expect;
} bad_flags[] = {
    { "--worker-id", "32", "[snowflake] worker_id = '32' (from --worker-id) is not valid: allowed an integer 0..31 or auto" },
    { "--datacenter-id", "-1", "[snowflake] datacenter_id = '-1' (from --datacenter-id) is not valid: allowed an integer 0..31" },
    { "--port", "65536", "[snowflake] server_port = '65536' (from --port) is not valid: allowed an integer 0..65535" },
    { "--port", "http", "allowed an integer 0..65535" },
    { "--bind", "example.org", "[snowflake] bind_address = 'example.org' (from --bind) is not valid: allowed an IPv4 or IPv6 address" },
    { "--log-level", "loud", "allowed error, warning, info or debug" },
    { "--threads", "0", "allowed an integer 1..256" },
    { "--set", "snowflake.max_batch_size=0", "[snowflake] max_batch_size = '0' (from --set) is not valid: allowed an integer 1..1000000" },
    { "--set", "snowflake.max_useragent_length=4097", "[snowflake] max_useragent_length = '4097' (from --set) is not valid: allowed an integer 1..4096" },
    { "--set", "snowflake.max_tracked_useragents=-1", "allowed an integer 0..100000" },
    { "--set", "snowflake.write_timeout_ms=0", "allowed an integer 1..3600000" },
    { "--set", "snowflake.max_output_buffer=1048575", "allowed an integer 1048576..1073741824" },
    { "--set", "zookeeper.max_peer_skew_ms=600001", "[zookeeper] max_peer_skew_ms = '600001' (from --set) is not valid: allowed an integer 0..600000" },
    { "--set", "zookeeper.max_peer_skew_ms=-1", "allowed an integer 0..600000" },
    { "--set", "snowflake.nope=1", "--set: unknown key 'nope' in group [snowflake]" },
    { "--set", "noequals", "expected GROUP.KEY=VALUE" },
};

START_TEST(test_bad_flag_values)
{
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, bad_flags[_i].flag, bad_flags[_i].value, NULL));
    assert_error(error, bad_flags[_i].expect);
    g_clear_error(&error);
    sf_config_clear(&cfg);
}
END_TEST

START_TEST(test_bad_file_value_names_file)
{
    write_conf("[snowflake]\nmax_clock_backward_wait_ms = 70000\n");
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, "-c", conf_path, NULL));
    assert_error(error, "[snowflake] max_clock_backward_wait_ms = '70000' (from /tmp/check_config_");
    assert_error(error, "allowed an integer 0..60000");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    remove_conf();
}
END_TEST

START_TEST(test_unknown_key_in_file)
{
    write_conf("[snowflake]\nworker_idd = 3\n");
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, "-c", conf_path, NULL));
    assert_error(error, "unknown key 'worker_idd' in group [snowflake]");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    remove_conf();
}
END_TEST

START_TEST(test_unreadable_and_malformed_files)
{
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, "-c", "/nonexistent/snowflake.conf", NULL));
    assert_error(error, "cannot read config file /nonexistent/snowflake.conf");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    write_conf("this is not a key file\n");
    ck_assert(!load(&cfg, &error, "-c", conf_path, NULL));
    assert_error(error, "cannot read config file");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    remove_conf();
}
END_TEST

START_TEST(test_bad_env_value_names_variable)
{
    setenv("SNOWFLAKE_ZOOKEEPER_SESSION_TIMEOUT_MS", "5", 1);
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, NULL));
    assert_error(error, "(from environment variable SNOWFLAKE_ZOOKEEPER_SESSION_TIMEOUT_MS)");
    assert_error(error, "allowed an integer 1000..600000");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    unsetenv("SNOWFLAKE_ZOOKEEPER_SESSION_TIMEOUT_MS");
}
END_TEST

START_TEST(test_cross_key_rules)
{
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, "--port", "9990", NULL));
    assert_error(error, "[admin] http_port = 9990 is the same as [snowflake] server_port");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    /* The HTTP ids port's own, by flag or key. */
    const char *const clashes[][3] = {
        {"--http-port", "7609", "[http] port = 7609 is the same as [snowflake] server_port"},
        {"--set", "http.port=9990", "[http] port = 9990 is the same as [admin] http_port"}};
    for (size_t i = 0; i < G_N_ELEMENTS(clashes); i++) {
        ck_assert(!load(&cfg, &error, clashes[i][0], clashes[i][1], NULL));
        assert_error(error, clashes[i][2]);
        g_clear_error(&error);
        sf_config_clear(&cfg);
    }
    ck_assert(load(&cfg, &error, "--http-port", "8080", "--admin-port", "0", NULL));
    ck_assert_int_eq(cfg.http.port, 8080);
    sf_config_clear(&cfg);
    ck_assert(!load(&cfg, &error, "--set", "snowflake.worker_id_path=relative", NULL));
    assert_error(error, "worker_id_path = 'relative' is not valid");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    ck_assert(!load(&cfg, &error, "--set", "snowflake.epoch_ms=4000000000000", NULL));
    assert_error(error, "is in the future");
    g_clear_error(&error);
    sf_config_clear(&cfg);
}
END_TEST

START_TEST(test_worker_id_path_refused_before_start)
{
    /* Every path the registry would refuse after the port is bound is refused here,
     * naming the value; the usual paths pass. */
    static const char *const bad[] = {"/", "/a//b", "/a/", "relative", "/a/./b", "/a/..", ""};
    char setting[700];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sf_config cfg;
        GError *error = NULL;
        snprintf(setting, sizeof setting, "snowflake.worker_id_path=%s", bad[i]);
        ck_assert_msg(!load(&cfg, &error, "--set", setting, NULL), "%s was accepted", bad[i]);
        char *want = g_strdup_printf("worker_id_path = '%s' is not valid", bad[i]);
        assert_error(error, want);
        g_free(want);
        g_clear_error(&error);
        sf_config_clear(&cfg);
    }
    char longpath[600];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    snprintf(setting, sizeof setting, "snowflake.worker_id_path=%s", longpath);
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, "--set", setting, NULL));
    assert_error(error, "at most");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    static const char *const good[] = {"/snowflake-servers", "/a/b", "/a.b/c..d"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(setting, sizeof setting, "snowflake.worker_id_path=%s", good[i]);
        ck_assert_msg(load(&cfg, &error, "--set", setting, NULL), "%s: %s", good[i],
                      error != NULL ? error->message : "");
        ck_assert_str_eq(cfg.registry.worker_id_path, good[i]);
        sf_config_clear(&cfg);
    }
}
END_TEST

START_TEST(test_unknown_flag_and_argument)
{
    sf_config cfg;
    GError *error = NULL;
    ck_assert(!load(&cfg, &error, "--bogus", NULL));
    assert_error(error, "--bogus");
    g_clear_error(&error);
    sf_config_clear(&cfg);
    ck_assert(!load(&cfg, &error, "stray", NULL));
    assert_error(error, "unexpected argument 'stray'");
    g_clear_error(&error);
    sf_config_clear(&cfg);
}
END_TEST

START_TEST(test_shipped_conf_loads)
{
    char *path = g_build_filename(g_getenv("top_srcdir") ? g_getenv("top_srcdir") : ".", "conf",
                                  "snowflake.conf", NULL);
    sf_config cfg;
    GError *error = NULL;
    ck_assert_msg(load(&cfg, &error, "-c", path, NULL), "%s", error ? error->message : "");
    ck_assert_str_eq(cfg.registry.hosts, ""); /* standalone by default */
    ck_assert_int_eq(cfg.http.port, 0);       /* [http] ships commented out: off */
    sf_config_clear(&cfg);
    g_free(path);
}
END_TEST

/* The comment that governs key in the shipped file: its own, or, for a key listed
 * right under another without one, that of the first key of the run. */
static char *governing_comment(GKeyFile *kf, const char *group, const char *name)
{
    char **keys = g_key_file_get_keys(kf, group, NULL, NULL);
    char *governing = NULL;
    for (char **k = keys; keys != NULL && *k != NULL; k++) {
        char *comment = g_key_file_get_comment(kf, group, *k, NULL);
        if (comment != NULL && comment[0] != '\0') {
            g_free(governing);
            governing = comment;
        } else {
            g_free(comment);
        }
        if (strcmp(*k, name) == 0)
            break;
    }
    g_strfreev(keys);
    return governing;
}

typedef struct {
    GHashTable *defaults; /* "group.name" -> the built-in default, as text */
    GKeyFile *kf;         /* the shipped file */
    GString *problems;
} shipped_check;

static void collect_default(const char *group, const char *name, const char *allowed,
                            const char *value, void *ctx)
{
    (void)allowed;
    g_hash_table_insert(ctx, g_strdup_printf("%s.%s", group, name), g_strdup(value));
}

/* One key of the shipped file: present, set to the built-in default, and its range (as
 * --help states it, from the table) written in its comment. */
static void check_shipped_key(const char *group, const char *name, const char *allowed,
                              const char *value, void *ctx)
{
    shipped_check *c = ctx;
    char *id = g_strdup_printf("%s.%s", group, name);
    const char *dflt = g_hash_table_lookup(c->defaults, id);
    if (!g_key_file_has_key(c->kf, group, name, NULL))
        g_string_append_printf(c->problems, "[%s] %s is missing\n", group, name);
    else if (dflt == NULL || strcmp(dflt, value) != 0)
        g_string_append_printf(c->problems, "[%s] %s = %s, the default is %s\n", group, name,
                               value, dflt != NULL ? dflt : "(none)");
    const char *integer = "an integer ";
    if (g_str_has_prefix(allowed, integer)) {
        char *range = g_strdup(allowed + strlen(integer));
        char *space = strchr(range, ' ');
        if (space != NULL)
            *space = '\0'; /* "0..31 or auto" */
        char *comment = governing_comment(c->kf, group, name);
        if (comment == NULL || strstr(comment, range) == NULL)
            g_string_append_printf(c->problems, "[%s] %s: its comment does not say %s\n", group,
                                   name, range);
        g_free(comment);
        g_free(range);
    }
    g_free(id);
}

START_TEST(test_shipped_conf_states_defaults_and_ranges)
{
    char *path = g_build_filename(g_getenv("top_srcdir") ? g_getenv("top_srcdir") : ".", "conf",
                                  "snowflake.conf", NULL);
    shipped_check c = {
        .defaults = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free),
        .kf = g_key_file_new(),
        .problems = g_string_new(NULL),
    };
    sf_config defaults, shipped;
    GError *error = NULL;
    sf_config_init(&defaults);
    sf_config_foreach_key(&defaults, collect_default, c.defaults);
    /* A group shipped commented out (#[http], its keys #key = default) is checked as if it
     * were not: its keys must be there all the same, with their defaults and ranges. */
    char *text = NULL;
    ck_assert(g_file_get_contents(path, &text, NULL, NULL));
    GRegex *commented = g_regex_new("^#(?=\\[\\w+\\]$|\\w+ = )", G_REGEX_MULTILINE, 0, NULL);
    char *uncommented = g_regex_replace_literal(commented, text, -1, 0, "", 0, NULL);
    ck_assert_msg(g_key_file_load_from_data(c.kf, uncommented, (gsize)-1,
                                            G_KEY_FILE_KEEP_COMMENTS, &error), "%s",
                  error != NULL ? error->message : "");
    sf_config_init(&shipped);
    ck_assert_msg(sf_config_load_data(&shipped, uncommented, strlen(uncommented), path, &error),
                  "%s", error ? error->message : "");
    g_free(uncommented);
    g_regex_unref(commented);
    g_free(text);
    sf_config_foreach_key(&shipped, check_shipped_key, &c);
    ck_assert_msg(c.problems->len == 0, "%s disagrees with the built-in settings:\n%s", path,
                  c.problems->str);
    sf_config_clear(&shipped);
    sf_config_clear(&defaults);
    g_string_free(c.problems, TRUE);
    g_key_file_free(c.kf);
    g_hash_table_destroy(c.defaults);
    g_free(path);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_file_then_env_then_flags);
    tcase_add_test(tc, test_worker_id_auto);
    tcase_add_loop_test(tc, test_bad_flag_values, 0, G_N_ELEMENTS(bad_flags));
    tcase_add_test(tc, test_bad_file_value_names_file);
    tcase_add_test(tc, test_unknown_key_in_file);
    tcase_add_test(tc, test_unreadable_and_malformed_files);
    tcase_add_test(tc, test_bad_env_value_names_variable);
    tcase_add_test(tc, test_cross_key_rules);
    tcase_add_test(tc, test_worker_id_path_refused_before_start);
    tcase_add_test(tc, test_unknown_flag_and_argument);
    tcase_add_test(tc, test_shipped_conf_loads);
    tcase_add_test(tc, test_shipped_conf_states_defaults_and_ranges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The tests set the variables they read; any the suite inherits (the test command
     * picks the event loop through one) would change what they check. */
    gchar **names = g_listenv();
    for (gchar **n = names; *n != NULL; n++)
        if (g_str_has_prefix(*n, "SNOWFLAKE_"))
            g_unsetenv(*n);
    g_strfreev(names);
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
