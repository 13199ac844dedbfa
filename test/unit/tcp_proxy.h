/* tcp_proxy.h -- a fault-injecting TCP proxy thread for the tests: it stands between a client
 * (or a ZooKeeper server) and a real server on loopback, and forwards, refuses, black-holes,
 * delays or holds the traffic on demand, so a test can cut or slow a link without touching the
 * processes on either end. */
#ifndef SF_TEST_TCP_PROXY_H
#define SF_TEST_TCP_PROXY_H

#include <stdbool.h>

typedef enum sf_test_proxy_mode {
    SF_PROXY_FORWARD,   /* pass bytes both ways */
    SF_PROXY_REFUSE,    /* close every connection, accepted ones at once */
    SF_PROXY_BLACKHOLE  /* keep connections open but pass nothing (a silent network) */
} sf_test_proxy_mode;

typedef struct sf_test_proxy sf_test_proxy;

/* Listens on a free 127.0.0.1 port and forwards to 127.0.0.1:target_port.
 * Returns NULL after printing why on standard error. */
sf_test_proxy *sf_test_proxy_start(int target_port);

/* The port the proxy listens on. */
int sf_test_proxy_port(sf_test_proxy *p);

/* Switches the mode; leaving SF_PROXY_BLACKHOLE or entering SF_PROXY_REFUSE closes the
 * connections open now, so both ends see the cut at once. */
void sf_test_proxy_set_mode(sf_test_proxy *p, sf_test_proxy_mode mode);

/* Forwards the next n connections accepted, then refuses all later ones: lets one
 * reconnect through and breaks the one after it. */
void sf_test_proxy_forward_then_refuse(sf_test_proxy *p, int n);

/* Delays what passes from now on by up_ms on the way from the client to the server and
 * down_ms on the way back (one-way delays: a request's round trip grows by their sum), in
 * order: a shorter delay never lets bytes overtake ones still waiting. 0, 0 ends it. */
void sf_test_proxy_set_delay(sf_test_proxy *p, int up_ms, int down_ms);

/* hold true: what the client sends waits in the proxy, in order, nothing lost (a link that
 * stalls); false: it all goes at once, as TCP delivers after a retransmission, and what
 * follows passes again. */
void sf_test_proxy_hold_up(sf_test_proxy *p, bool hold);

/* On the connections accepted from now on, passes what the client sends first (a ZooKeeper
 * client's handshake) and holds everything it sends after that for ms, then passes it on:
 * the connection stays open and the server's answers flow, but the client's first request
 * waits as behind a stalled network. Once a hold caught something the client sent, later
 * connections pass freely (a client that gave up on a connection during its handshake is
 * held again on the next). */
void sf_test_proxy_hold_after_first(sf_test_proxy *p, int ms);

/* The first time the client sends something holding bytes (e.g. a ZooKeeper path), passes
 * that read on and then nothing more on its connection, either way: the request reaches the
 * server, its answer is lost, and the client times out as on a dead network. Later
 * connections are then held as sf_test_proxy_hold_after_first(hold_next_ms) does (0: not
 * held), so what the client asks first after reconnecting times out too. */
void sf_test_proxy_cut_after(sf_test_proxy *p, const char *bytes, int hold_next_ms);

/* How many connections the proxy has accepted so far. */
int sf_test_proxy_accepted(sf_test_proxy *p);

/* Stops the thread and closes every socket. NULL is allowed. */
void sf_test_proxy_stop(sf_test_proxy *p);

#endif /* SF_TEST_TCP_PROXY_H */
