/* zk_harness.h -- a real, throwaway ZooKeeper server for the C tests (wraps test/tools/zk-server.sh). */
#ifndef SF_TEST_ZK_HARNESS_H
#define SF_TEST_ZK_HARNESS_H

#include <stddef.h>

typedef struct sf_test_zk {
    char dir[256];   /* temporary data directory */
    char hosts[64];  /* "127.0.0.1:PORT" once started */
} sf_test_zk;

/* Creates a temporary directory and starts a server in it, waiting until it serves.
 * Returns 0, or -1 after printing why on standard error. */
int sf_test_zk_start(sf_test_zk *zk);

/* Stops the server; its data and port are kept for sf_test_zk_restart(). */
int sf_test_zk_stop(sf_test_zk *zk);

/* Starts the server again on the same port with the same data. */
int sf_test_zk_restart(sf_test_zk *zk);

/* Writes settings that every later start of the server adds to its own (zoo.cfg lines,
 * e.g. "maxSessionTimeout=2000\n"), so a restart can change them. 0, or -1 after printing why. */
int sf_test_zk_set_extra_cfg(sf_test_zk *zk, const char *cfg);

/* A free TCP port on 127.0.0.1 (bound and released: free at the moment of the call). */
int sf_test_zk_free_port(void);

/* Starts one member of an ensemble in a new temporary directory: client_port for clients,
 * quorum_cfg the server.N lines (and initLimit, syncLimit) as this member sees them.
 * Returns once the process answers, before it has a quorum; 0, or -1 after printing why. */
int sf_test_zk_start_member(sf_test_zk *zk, int myid, int client_port, const char *quorum_cfg);

/* Writes the server's role into out: leader, follower, standalone, or none. */
int sf_test_zk_mode(sf_test_zk *zk, char *out, size_t outlen);

/* Stops the server and removes its directory. */
void sf_test_zk_destroy(sf_test_zk *zk);

/* Stops every server whose directory is under base and removes base: the clean-up for
 * servers a killed test could not stop itself. */
int sf_test_zk_stop_all_under(const char *base);

#endif /* SF_TEST_ZK_HARNESS_H */
