/* fuzz_config.c -- fuzz target: arbitrary bytes as snowflaked's key file.
 * Whatever the input, loading must either succeed with every value in range
 * or fail with a message; never crash, leak or hang. */
#include "server/config.h"

#include <stdint.h>
#include <stdlib.h>

#include "lib/snowflake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sf_config cfg;
    GError *error = NULL;
    sf_config_init(&cfg);
    if (sf_config_load_data(&cfg, (const char *)data, size, "fuzz", &error) &&
        sf_config_validate(&cfg, &error)) {
        if (cfg.worker_id_auto ? cfg.worker_id != -1
                               : (cfg.worker_id < 0 || cfg.worker_id > SF_MAX_WORKER_ID))
            abort();
        if (cfg.datacenter_id < 0 || cfg.datacenter_id > SF_MAX_DATACENTER_ID)
            abort();
        if (cfg.server.port < 0 || cfg.server.port > 65535 || cfg.server.max_frame_size < 64)
            abort();
        char why[256];
        if (!sf_http_options_check(&cfg.http, why, sizeof why) ||
            (cfg.http.port != 0 &&
             (cfg.http.port == cfg.server.port || cfg.http.port == cfg.admin_port)))
            abort(); /* the HTTP port's settings in range, its port its own */
    } else if (error == NULL || error->message == NULL || error->message[0] == '\0') {
        abort(); /* a refusal must say why */
    }
    g_clear_error(&error);
    sf_config_clear(&cfg);
    return 0;
}
