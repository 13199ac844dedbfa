/* zk_harness.h -- a real, throwaway ZooKeeper server for the C tests (wraps test/zk-server.sh). */
#ifndef SF_TEST_ZK_HARNESS_H
#define SF_TEST_ZK_HARNESS_H

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

/* Stops the server and removes its directory. */
void sf_test_zk_destroy(sf_test_zk *zk);

#endif /* SF_TEST_ZK_HARNESS_H */
