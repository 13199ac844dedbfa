/* tcp_proxy.c -- a fault-injecting TCP proxy thread for the tests (see tcp_proxy.h). One poll()
 * loop serves the listener and every connection pair; a pipe wakes it on a mode change. What
 * is delayed or held waits in a queue per direction of each pair, in the order it came. */
#define _GNU_SOURCE /* memmem */
#include "tcp_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROXY_MAX_PAIRS 64
#define PROXY_HELD INT64_MAX /* the due time of what is held */

/* Bytes read from one end, waiting to be written to the other at due (monotonic ms). */
typedef struct sf_proxy_chunk {
    struct sf_proxy_chunk *next;
    int64_t due;
    size_t len;
    char data[];
} sf_proxy_chunk;

/* One direction of a pair: its queue, oldest first. */
typedef struct sf_proxy_queue {
    sf_proxy_chunk *head, *tail;
} sf_proxy_queue;

struct sf_test_proxy {
    int listen_fd, port, target_port;
    int wake[2];               /* written on every change, read by the loop */
    pthread_t thread;
    pthread_mutex_t mu;
    sf_test_proxy_mode mode;
    int forward_budget;        /* >= 0: connections to forward before refusing; -1 = no limit */
    bool drop_all;             /* close every open pair at the next turn of the loop */
    bool stop;
    int accepted;
    int delay_ms[2];           /* per direction: 0 = client to server, 1 = back */
    bool hold_up;              /* client to server held until released */
    bool release;              /* hold_up just ended: send what was held */
    int pairs[PROXY_MAX_PAIRS][2]; /* client fd, server fd; -1 when free */
    sf_proxy_queue queues[PROXY_MAX_PAIRS][2]; /* what waits to go from pairs[i][k] */
    int hold_ms;               /* > 0: connections' clients are held after their first read,
                                * until one of them sent something meanwhile */
    char cut_after[128];       /* non-empty: the first client read holding these bytes passes,
                                * then its connection passes nothing more */
    int cut_hold_ms;           /* the hold_ms set once the cut happened */
    int hold[PROXY_MAX_PAIRS];     /* the pair's hold: ms still to hold after the first read */
    bool first_read[PROXY_MAX_PAIRS]; /* its client's first read passed */
    int64_t held_until[PROXY_MAX_PAIRS]; /* monotonic ms; 0 = not held */
    bool cut[PROXY_MAX_PAIRS];     /* passes nothing either way (see cut_after) */
};

static int64_t sf_proxy_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Ends the hold of pair i: when its client sent something meanwhile, the hold caught a
 * request, and later connections are not held. */
static void sf_proxy_end_hold(sf_test_proxy *p, int i)
{
    if (p->held_until[i] == 0)
        return;
    p->held_until[i] = 0;
    char b;
    if (recv(p->pairs[i][0], &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
        pthread_mutex_lock(&p->mu);
        p->hold_ms = 0;
        pthread_mutex_unlock(&p->mu);
    }
}

/* Drops what waits in a queue. */
static void sf_proxy_queue_clear(sf_proxy_queue *q)
{
    while (q->head) {
        sf_proxy_chunk *c = q->head;
        q->head = c->next;
        free(c);
    }
    q->tail = NULL;
}

/* Small writes go out at once (no Nagle): what the proxy passes on arrives when due. */
static void sf_proxy_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        perror("tcp_proxy: TCP_NODELAY");
}

/* Connects to the real server on loopback; -1 when it is not there. */
static int sf_proxy_connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    sf_proxy_nodelay(fd);
    return fd;
}

/* Closes both ends of a pair and frees its slot. */
static void sf_proxy_close_pair(sf_test_proxy *p, int i)
{
    if (p->pairs[i][0] >= 0)
        sf_proxy_end_hold(p, i);
    for (int k = 0; k < 2; k++) {
        if (p->pairs[i][k] >= 0)
            close(p->pairs[i][k]);
        p->pairs[i][k] = -1;
        sf_proxy_queue_clear(&p->queues[i][k]);
    }
}

/* Accepts one connection and pairs it with the server, or closes it at once when refusing. */
static void sf_proxy_accept(sf_test_proxy *p)
{
    int c = accept(p->listen_fd, NULL, NULL);
    if (c < 0)
        return;
    pthread_mutex_lock(&p->mu);
    p->accepted++;
    int hold = p->hold_ms;
    sf_test_proxy_mode mode = p->mode;
    if (mode == SF_PROXY_FORWARD && p->forward_budget == 0)
        mode = p->mode = SF_PROXY_REFUSE;
    else if (mode == SF_PROXY_FORWARD && p->forward_budget > 0)
        p->forward_budget--;
    pthread_mutex_unlock(&p->mu);
    int s = mode == SF_PROXY_REFUSE ? -1 : sf_proxy_connect_target(p->target_port);
    int slot = -1;
    for (int i = 0; i < PROXY_MAX_PAIRS && slot < 0; i++)
        if (p->pairs[i][0] < 0)
            slot = i;
    if (s < 0 || slot < 0) {
        if (s >= 0)
            close(s);
        close(c);
        return;
    }
    sf_proxy_nodelay(c);
    p->pairs[slot][0] = c;
    p->pairs[slot][1] = s;
    p->hold[slot] = hold;
    p->first_read[slot] = false;
    p->held_until[slot] = 0;
    p->cut[slot] = false;
}

/* Writes all of buf to fd; false when the other end is gone. */
static bool sf_proxy_write_all(int fd, const char *buf, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        off += (size_t)w;
    }
    return true;
}

/* True once when buf holds the bytes cut_after asks for: they are the last the pair passes,
 * and later connections are held for cut_hold_ms after their first read. */
static bool sf_proxy_cut_now(sf_test_proxy *p, const char *buf, size_t n)
{
    pthread_mutex_lock(&p->mu);
    size_t len = strlen(p->cut_after);
    bool hit = len > 0 && memmem(buf, n, p->cut_after, len) != NULL;
    if (hit) {
        p->cut_after[0] = '\0';
        p->hold_ms = p->cut_hold_ms;
    }
    pthread_mutex_unlock(&p->mu);
    return hit;
}

/* Moves what end k of pair i has sent to the other end: at once, or queued until due when
 * a delay or a hold applies (or something already waits: the order is kept); dropped when
 * black-holing or cut. False when the pair is finished. */
static bool sf_proxy_pump(sf_test_proxy *p, int i, int k, bool blackhole, int delay_ms, bool hold)
{
    char buf[16384];
    ssize_t n = read(p->pairs[i][k], buf, sizeof buf);
    if (n <= 0)
        return false;
    if (blackhole || p->cut[i])
        return true;
    if (k == 0 && sf_proxy_cut_now(p, buf, (size_t)n))
        p->cut[i] = true; /* after this read: the request goes, its answer is lost */
    sf_proxy_queue *q = &p->queues[i][k];
    if (delay_ms == 0 && !hold && q->head == NULL)
        return sf_proxy_write_all(p->pairs[i][1 - k], buf, (size_t)n);
    sf_proxy_chunk *c = malloc(sizeof *c + (size_t)n);
    if (c == NULL)
        return false;
    c->next = NULL;
    c->len = (size_t)n;
    memcpy(c->data, buf, (size_t)n);
    c->due = hold ? PROXY_HELD : sf_proxy_now_ms() + delay_ms;
    if (q->tail != NULL && q->tail->due > c->due) /* a shorter delay never overtakes */
        c->due = q->tail->due;
    if (q->tail != NULL)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    return true;
}

/* Writes out what is due in every queue (releasing what was held when asked), and returns
 * the ms until the next chunk is due (at most max_wait). */
static int sf_proxy_flush(sf_test_proxy *p, bool release, int max_wait)
{
    int64_t now = sf_proxy_now_ms(), wait = max_wait;
    for (int i = 0; i < PROXY_MAX_PAIRS; i++) {
        for (int k = 0; k < 2 && p->pairs[i][0] >= 0; k++) {
            sf_proxy_queue *q = &p->queues[i][k];
            for (sf_proxy_chunk *c = q->head; release && c != NULL; c = c->next)
                if (c->due == PROXY_HELD)
                    c->due = now;
            while (q->head != NULL && q->head->due <= now) {
                sf_proxy_chunk *c = q->head;
                bool ok = sf_proxy_write_all(p->pairs[i][1 - k], c->data, c->len);
                q->head = c->next;
                if (q->head == NULL)
                    q->tail = NULL;
                free(c);
                if (!ok) {
                    sf_proxy_close_pair(p, i);
                    break;
                }
            }
            if (q->head != NULL && q->head->due != PROXY_HELD && q->head->due - now < wait)
                wait = q->head->due - now;
        }
    }
    return (int)wait;
}

/* The proxy's thread: poll, accept, pump, until stopped. */
static void *sf_proxy_loop(void *arg)
{
    sf_test_proxy *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        bool stop = p->stop, drop = p->drop_all, hold = p->hold_up, release = p->release;
        sf_test_proxy_mode mode = p->mode;
        int delay[2] = {p->delay_ms[0], p->delay_ms[1]};
        p->drop_all = false;
        p->release = false;
        pthread_mutex_unlock(&p->mu);
        if (drop || stop)
            for (int i = 0; i < PROXY_MAX_PAIRS; i++)
                sf_proxy_close_pair(p, i);
        if (stop)
            return NULL;
        int wait = sf_proxy_flush(p, release, 1000);
        struct pollfd fds[2 + 2 * PROXY_MAX_PAIRS];
        int idx[2 + 2 * PROXY_MAX_PAIRS];
        int n = 0;
        fds[n++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
        int64_t now = sf_proxy_now_ms();
        for (int i = 0; i < PROXY_MAX_PAIRS; i++) {
            if (p->pairs[i][0] < 0)
                continue;
            if (p->held_until[i] != 0 && p->held_until[i] <= now)
                sf_proxy_end_hold(p, i);
            for (int k = 0; k < 2; k++) {
                if (k == 0 && p->held_until[i] > now) { /* held: its bytes wait in the socket */
                    if (p->held_until[i] - now < wait)
                        wait = (int)(p->held_until[i] - now);
                    continue;
                }
                idx[n] = i * 2 + k;
                fds[n++] = (struct pollfd){.fd = p->pairs[i][k], .events = POLLIN};
            }
        }
        if (poll(fds, (nfds_t)n, wait) < 0 && errno != EINTR)
            return NULL;
        if (fds[0].revents & POLLIN) {
            char b[64];
            if (read(p->wake[0], b, sizeof b) < 0 && errno != EAGAIN)
                return NULL;
        }
        if (fds[1].revents & POLLIN)
            sf_proxy_accept(p);
        for (int j = 2; j < n; j++) {
            if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int i = idx[j] / 2, k = idx[j] % 2;
            if (p->pairs[i][k] < 0)
                continue;
            if (!sf_proxy_pump(p, i, k, mode == SF_PROXY_BLACKHOLE, delay[k], k == 0 && hold))
                sf_proxy_close_pair(p, i);
            else if (k == 0 && p->hold[i] > 0 && !p->first_read[i]) {
                p->first_read[i] = true;
                p->held_until[i] = sf_proxy_now_ms() + p->hold[i];
            }
        }
    }
}

/* Wakes the loop so it sees a change at once. */
static void sf_proxy_wake(sf_test_proxy *p)
{
    if (write(p->wake[1], "x", 1) < 0 && errno != EAGAIN)
        perror("tcp_proxy: wake");
}

sf_test_proxy *sf_test_proxy_start(int target_port)
{
    sf_test_proxy *p = calloc(1, sizeof *p);
    if (!p) {
        perror("tcp_proxy: calloc");
        return NULL;
    }
    for (int i = 0; i < PROXY_MAX_PAIRS; i++)
        p->pairs[i][0] = p->pairs[i][1] = -1;
    p->target_port = target_port;
    p->forward_budget = -1;
    p->mode = SF_PROXY_FORWARD;
    pthread_mutex_init(&p->mu, NULL);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->listen_fd, 16) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&a, &len) != 0 || pipe(p->wake) != 0) {
        perror("tcp_proxy: cannot listen on 127.0.0.1");
        if (p->listen_fd >= 0)
            close(p->listen_fd);
        free(p);
        return NULL;
    }
    fcntl(p->wake[0], F_SETFL, O_NONBLOCK);
    fcntl(p->wake[1], F_SETFL, O_NONBLOCK);
    p->port = ntohs(a.sin_port);
    if (pthread_create(&p->thread, NULL, sf_proxy_loop, p) != 0) {
        fprintf(stderr, "tcp_proxy: cannot start its thread\n");
        close(p->listen_fd);
        close(p->wake[0]);
        close(p->wake[1]);
        free(p);
        return NULL;
    }
    return p;
}

int sf_test_proxy_port(sf_test_proxy *p)
{
    return p->port;
}

void sf_test_proxy_set_mode(sf_test_proxy *p, sf_test_proxy_mode mode)
{
    pthread_mutex_lock(&p->mu);
    if (mode == SF_PROXY_REFUSE || (p->mode == SF_PROXY_BLACKHOLE && mode != SF_PROXY_BLACKHOLE))
        p->drop_all = true;
    p->mode = mode;
    p->forward_budget = -1;
    pthread_mutex_unlock(&p->mu);
    sf_proxy_wake(p);
}

void sf_test_proxy_forward_then_refuse(sf_test_proxy *p, int n)
{
    pthread_mutex_lock(&p->mu);
    if (p->mode == SF_PROXY_BLACKHOLE)
        p->drop_all = true;
    p->mode = SF_PROXY_FORWARD;
    p->forward_budget = n;
    pthread_mutex_unlock(&p->mu);
    sf_proxy_wake(p);
}

void sf_test_proxy_set_delay(sf_test_proxy *p, int up_ms, int down_ms)
{
    pthread_mutex_lock(&p->mu);
    p->delay_ms[0] = up_ms;
    p->delay_ms[1] = down_ms;
    pthread_mutex_unlock(&p->mu);
    sf_proxy_wake(p);
}

void sf_test_proxy_hold_up(sf_test_proxy *p, bool hold)
{
    pthread_mutex_lock(&p->mu);
    p->release = p->release || (p->hold_up && !hold);
    p->hold_up = hold;
    pthread_mutex_unlock(&p->mu);
    sf_proxy_wake(p);
}

void sf_test_proxy_hold_after_first(sf_test_proxy *p, int ms)
{
    pthread_mutex_lock(&p->mu);
    p->hold_ms = ms;
    pthread_mutex_unlock(&p->mu);
}

void sf_test_proxy_cut_after(sf_test_proxy *p, const char *bytes, int hold_next_ms)
{
    pthread_mutex_lock(&p->mu);
    snprintf(p->cut_after, sizeof p->cut_after, "%s", bytes);
    p->cut_hold_ms = hold_next_ms;
    pthread_mutex_unlock(&p->mu);
}

int sf_test_proxy_accepted(sf_test_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->accepted;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void sf_test_proxy_stop(sf_test_proxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    sf_proxy_wake(p);
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
