/* delay_proxy.c -- delaying TCP proxies for the chaos run (scripts/chaos): one in front of
 * each ZooKeeper server, so that a fault can make every round trip of the nodes behind them
 * slow while the servers and the other nodes go on as they were. A poll() loop per proxy
 * (test/unit/tcp_proxy.c), not an interpreter: the delay it adds is the one asked for, also
 * when the machine is busy.
 *
 * Usage: delay_proxy TARGET_PORT...
 * Prints the port each listens on (127.0.0.1), one line per target in order, then reads
 * commands from standard input, one a line: "delay MS" (each way, from now on; 0 = none).
 * Exits at end of input. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "tcp_proxy.h"

#define MAX_TARGETS 16

int main(int argc, char **argv)
{
    if (argc < 2 || argc - 1 > MAX_TARGETS) {
        fprintf(stderr, "usage: delay_proxy TARGET_PORT... (1 to %d of them)\n", MAX_TARGETS);
        return 2;
    }
    sf_test_proxy *proxies[MAX_TARGETS];
    int n = argc - 1;
    for (int i = 0; i < n; i++) {
        int port = atoi(argv[i + 1]);
        if (port <= 0 || port > 65535) {
            fprintf(stderr, "delay_proxy: '%s' is not a port (1..65535)\n", argv[i + 1]);
            return 2;
        }
        proxies[i] = sf_test_proxy_start(port);
        if (proxies[i] == NULL)
            return 1;
        printf("%d\n", sf_test_proxy_port(proxies[i]));
    }
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof line, stdin) != NULL) {
        int ms;
        if (sscanf(line, "delay %d", &ms) != 1 || ms < 0 || ms > 600000) {
            fprintf(stderr, "delay_proxy: '%s' is not \"delay MS\" (MS 0..600000)\n", line);
            continue;
        }
        for (int i = 0; i < n; i++)
            sf_test_proxy_set_delay(proxies[i], ms, ms);
    }
    for (int i = 0; i < n; i++)
        sf_test_proxy_stop(proxies[i]);
    return 0;
}
