/* abuse_client.c -- misbehaving clients for the resource-bounds script: slowloris,
 * oversized frame headers, pipelining without reading, connection churn, a stream of
 * distinct long user agents, and frames nesting structs far too deep.
 *
 * Each mode runs for --seconds and ends with one line
 * "abuse_client: mode=NAME key=value ..." for scripts to parse. It exits non-zero
 * only when it could not do its job (no server, bad flags), not when the server
 * defends itself by closing connections: those closes are what it counts. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "load_clock.h"
#include "load_wire.h"

typedef enum {
    ABUSE_SLOWLORIS,
    ABUSE_BIGFRAME,
    ABUSE_PIPELINE,
    ABUSE_CHURN,
    ABUSE_AGENTS,
    ABUSE_NEST
} abuse_mode;

typedef struct abuse_options {
    const char *host;
    int port;
    abuse_mode mode;
    int connections; /* slowloris */
    double seconds;
    long requests;   /* pipeline */
    int rate;        /* churn: connections per second; bigframe, nest: attempts per second */
    int length;      /* agents: bytes per agent */
    int depth;       /* nest: structs nested in one frame */
} abuse_options;

/* Sleeps until the monotonic time t_ns (returns early on a signal). */
static void sleep_until(int64_t t_ns)
{
    struct timespec ts = {.tv_sec = t_ns / 1000000000LL, .tv_nsec = t_ns % 1000000000LL};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/* Opens a blocking TCP connection; -1 (errno set) on failure. */
static int connect_to(const struct sockaddr_in *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)addr, sizeof *addr) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* True if the peer has closed fd (EOF or reset); discards any bytes waiting. */
static bool peer_closed(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0)
            return true;
        return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
}

/* Slowloris: every connection sends one byte of a valid request per second. A
 * connection the server closes (its frame timeout) is counted and reopened, so
 * the pressure stays on for the whole run. */
static int run_slowloris(const abuse_options *opt, const struct sockaddr_in *addr,
                         const uint8_t *req, size_t req_len)
{
    int n = opt->connections;
    int *fds = calloc((size_t)n, sizeof *fds);
    size_t *pos = calloc((size_t)n, sizeof *pos);
    if (fds == NULL || pos == NULL) {
        fprintf(stderr, "abuse_client: out of memory for %d connections\n", n);
        return 1;
    }
    long closed_by_server = 0, connect_failures = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        fds[i] = connect_to(addr);
        if (fds[i] < 0) {
            fprintf(stderr, "abuse_client: cannot open slowloris connection %d of %d: %s\n",
                    i + 1, n, strerror(errno));
            return 1;
        }
    }
    int64_t start = load_now_ns(), end = start + (int64_t)(opt->seconds * 1e9);
    for (int64_t tick = start; tick < end && !load_stop_requested; tick += 1000000000LL) {
        sleep_until(tick);
        for (int i = 0; i < n; i++) {
            if (fds[i] >= 0 && peer_closed(fds[i])) {
                closed_by_server++;
                close(fds[i]);
                fds[i] = -1;
            }
            if (fds[i] < 0) {
                fds[i] = connect_to(addr);
                pos[i] = 0;
                if (fds[i] < 0) {
                    connect_failures++;
                    continue;
                }
            }
            if (send(fds[i], req + pos[i], 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
                bytes++;
                pos[i] = (pos[i] + 1) % req_len;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    free(pos);
    printf("abuse_client: mode=slowloris connections=%d seconds=%.1f bytes_sent=%ld "
           "closed_by_server=%ld connect_failures=%ld\n",
           n, opt->seconds, bytes, closed_by_server, connect_failures);
    return 0;
}

/* Oversized frames: each attempt sends a frame header claiming 2 GiB and 1 KiB of
 * payload, then waits up to 5 s for the server to close the connection. A
 * connection still open after that counts as not refused. */
static int run_bigframe(const abuse_options *opt, const struct sockaddr_in *addr)
{
    uint8_t msg[4 + 1024];
    memset(msg, 0xab, sizeof msg);
    msg[0] = 0x80; /* 0x80000000 = 2 GiB */
    msg[1] = msg[2] = msg[3] = 0;
    long attempts = 0, refused = 0, not_refused = 0, connect_failures = 0;
    int64_t start = load_now_ns(), end = start + (int64_t)(opt->seconds * 1e9);
    int64_t step = 1000000000LL / opt->rate;
    for (int64_t t = start; t < end && !load_stop_requested; t += step) {
        sleep_until(t);
        int fd = connect_to(addr);
        if (fd < 0) {
            connect_failures++;
            continue;
        }
        attempts++;
        send(fd, msg, sizeof msg, MSG_NOSIGNAL); /* a reset mid-send is a refusal too */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        bool closed = false;
        int64_t wait_end = load_now_ns() + 5000000000LL;
        while (!closed && load_now_ns() < wait_end && !load_stop_requested) {
            int rc = poll(&p, 1, (int)((wait_end - load_now_ns()) / 1000000) + 1);
            if (rc > 0)
                closed = peer_closed(fd);
            else if (rc < 0 && errno != EINTR)
                break;
        }
        if (closed)
            refused++;
        else
            not_refused++;
        close(fd);
    }
    printf("abuse_client: mode=bigframe seconds=%.1f attempts=%ld refused=%ld not_refused=%ld "
           "connect_failures=%ld\n",
           opt->seconds, attempts, refused, not_refused, connect_failures);
    return not_refused > 0 ? 1 : 0;
}

/* Pipelining without reading: writes up to --requests get_id requests on one
 * connection as fast as the server takes them, never reading, until the time is
 * up; then reads every reply to check that the server answered each one. */
static int run_pipeline(const abuse_options *opt, const struct sockaddr_in *addr,
                        const uint8_t *req, size_t req_len)
{
    int fd = connect_to(addr);
    if (fd < 0) {
        fprintf(stderr, "abuse_client: cannot connect to %s:%d: %s\n", opt->host, opt->port,
                strerror(errno));
        return 1;
    }
    size_t total = (size_t)opt->requests * req_len, written = 0;
    size_t chunk_cap = req_len * 1024;
    uint8_t *chunk = malloc(chunk_cap);
    if (chunk == NULL) {
        fprintf(stderr, "abuse_client: out of memory\n");
        return 1;
    }
    for (size_t off = 0; off < chunk_cap; off += req_len)
        memcpy(chunk + off, req, req_len);
    int64_t start = load_now_ns(), end = start + (int64_t)(opt->seconds * 1e9);
    int64_t all_written_at = -1;
    while (load_now_ns() < end && !load_stop_requested) {
        if (written < total) {
            size_t off = written % chunk_cap, len = chunk_cap - off;
            if (len > total - written)
                len = total - written;
            ssize_t n = send(fd, chunk + off, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                written += (size_t)n;
                if (written == total)
                    all_written_at = load_now_ns();
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                break; /* the server closed the connection */
        }
        struct pollfd p = {.fd = fd, .events = written < total ? POLLOUT : 0};
        int ms = (int)((end - load_now_ns()) / 1000000);
        poll(&p, 1, ms > 100 ? 100 : (ms < 0 ? 0 : ms));
    }
    free(chunk);
    long requests_written = (long)(written / req_len);
    /* Now read the replies: frames until every complete request is answered. */
    long replies = 0;
    uint8_t buf[65536];
    size_t have = 0;
    int64_t drain_end = load_now_ns() + 10000000000LL;
    bool eof = false;
    while (replies < requests_written && !eof && load_now_ns() < drain_end && !load_stop_requested) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, buf + have, sizeof buf - have, 0);
        if (n <= 0) {
            eof = true;
            break;
        }
        have += (size_t)n;
        size_t off = 0;
        while (have - off >= 4) {
            size_t frame = load_wire_be32(buf + off);
            if (frame > sizeof buf - 4) {
                fprintf(stderr, "abuse_client: a %zu-byte reply frame in the pipeline\n", frame);
                eof = true;
                break;
            }
            if (have - off < 4 + frame)
                break;
            off += 4 + frame;
            replies++;
        }
        memmove(buf, buf + off, have - off);
        have -= off;
    }
    close(fd);
    double write_secs = all_written_at > 0 ? (double)(all_written_at - start) / 1e9 : -1;
    printf("abuse_client: mode=pipeline seconds=%.1f requests=%ld requests_written=%ld "
           "all_written_after_s=%.2f replies=%ld closed_by_server=%d\n",
           opt->seconds, opt->requests, requests_written, write_secs, replies, eof ? 1 : 0);
    return 0;
}

/* Churn: opens and closes --rate connections a second, each closed as soon as
 * the connect completes. */
static int run_churn(const abuse_options *opt, const struct sockaddr_in *addr)
{
    long opened = 0, failures = 0;
    int first_errno = 0;
    int64_t start = load_now_ns(), end = start + (int64_t)(opt->seconds * 1e9);
    int64_t step = 1000000000LL / opt->rate;
    int64_t t = start;
    for (; t < end && !load_stop_requested; t += step) {
        sleep_until(t);
        int fd = connect_to(addr);
        if (fd < 0) {
            if (first_errno == 0)
                first_errno = errno;
            failures++;
            continue;
        }
        opened++;
        close(fd);
    }
    double secs = (double)(load_now_ns() - start) / 1e9;
    printf("abuse_client: mode=churn seconds=%.1f target_rate=%d opened=%ld rate=%.0f "
           "failures=%ld%s%s\n",
           opt->seconds, opt->rate, opened, secs > 0 ? (double)opened / secs : 0, failures,
           first_errno ? " first_failure=" : "", first_errno ? strerror(first_errno) : "");
    return 0;
}

/* Sends all of buf[0..len) on a blocking socket; false when the server closed it. */
static bool send_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads one reply frame (discarded); false when the connection ended first. */
static bool read_reply(int fd)
{
    uint8_t head[4], buf[4096];
    size_t got = 0;
    while (got < 4) {
        ssize_t n = recv(fd, head + got, 4 - got, 0);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    size_t left = load_wire_be32(head);
    while (left > 0) {
        ssize_t n = recv(fd, buf, left < sizeof buf ? left : sizeof buf, 0);
        if (n <= 0)
            return false;
        left -= (size_t)n;
    }
    return true;
}

/* Distinct agents: get_id back to back on one connection, each call with a new valid
 * agent of --length bytes, so that a server counting every agent by name grows without
 * bound. A closed connection is reopened. */
static int run_agents(const abuse_options *opt, const struct sockaddr_in *addr)
{
    char *agent = malloc((size_t)opt->length + 1);
    if (agent == NULL) {
        fprintf(stderr, "abuse_client: out of memory\n");
        return 1;
    }
    memset(agent, 'a', (size_t)opt->length);
    agent[opt->length] = '\0';
    long calls = 0, replies = 0, reconnects = 0;
    int fd = -1;
    int64_t start = load_now_ns(), end = start + (int64_t)(opt->seconds * 1e9);
    while (load_now_ns() < end && !load_stop_requested) {
        if (fd < 0 && (fd = connect_to(addr)) < 0) {
            fprintf(stderr, "abuse_client: cannot connect to %s:%d: %s\n", opt->host, opt->port,
                    strerror(errno));
            free(agent);
            return 1;
        }
        /* The call number in letters at the end: "aaa...aab", a valid agent each time. */
        long v = calls;
        for (int i = opt->length - 1; i > 0 && v > 0; i--, v /= 26)
            agent[i] = (char)('a' + v % 26);
        size_t len = 0;
        uint8_t *req = load_wire_encode(agent, 0, &len);
        if (req == NULL) {
            free(agent);
            return 1;
        }
        calls++;
        bool ok = send_all(fd, req, len) && read_reply(fd);
        free(req);
        if (ok) {
            replies++;
        } else {
            close(fd);
            fd = -1;
            reconnects++;
        }
    }
    if (fd >= 0)
        close(fd);
    free(agent);
    printf("abuse_client: mode=agents seconds=%.1f length=%d calls=%ld replies=%ld "
           "reconnects=%ld\n",
           opt->seconds, opt->length, calls, replies, reconnects);
    return 0;
}

/* Deep nesting: --rate times a second, a get_id call whose arguments hold an unknown
 * field nesting structs --depth deep (3 bytes a level), then waits up to 5 s for the
 * server to close the connection. One left open counts as not refused. */
static int run_nest(const abuse_options *opt, const struct sockaddr_in *addr)
{
    static const char name[] = "get_id", agent[] = "abuse";
    size_t depth = (size_t)opt->depth;
    size_t body = 8 + 6 + 4 + 3 + 4 + 5 + 3 + 3 * (depth - 1) + depth + 1;
    uint8_t *frame = malloc(4 + body), *p = frame + 4;
    if (frame == NULL) {
        fprintf(stderr, "abuse_client: out of memory for a %zu-byte frame\n", body);
        return 1;
    }
    const uint8_t head[] = {0x80, 0x01, 0x00, 0x01, 0, 0, 0, 6};
    memcpy(p, head, sizeof head), p += sizeof head;
    memcpy(p, name, 6), p += 6;
    memset(p, 0, 4), p += 4;                                /* seqid */
    *p++ = 11, *p++ = 0, *p++ = 1;                          /* field 1: string */
    *p++ = 0, *p++ = 0, *p++ = 0, *p++ = 5;
    memcpy(p, agent, 5), p += 5;
    *p++ = 12, *p++ = 0, *p++ = 99;                         /* field 99: struct */
    for (size_t i = 1; i < depth; i++)
        *p++ = 12, *p++ = 0, *p++ = 1;
    memset(p, 0, depth + 1), p += depth + 1;                /* every T_STOP */
    frame[0] = (uint8_t)(body >> 24), frame[1] = (uint8_t)(body >> 16);
    frame[2] = (uint8_t)(body >> 8), frame[3] = (uint8_t)body;
    long attempts = 0, refused = 0, not_refused = 0, connect_failures = 0;
    int64_t start = load_now_ns(), end = start + (int64_t)(opt->seconds * 1e9);
    int64_t step = 1000000000LL / opt->rate;
    for (int64_t t = start; t < end && !load_stop_requested; t += step) {
        sleep_until(t);
        int fd = connect_to(addr);
        if (fd < 0) {
            connect_failures++;
            continue;
        }
        attempts++;
        send_all(fd, frame, 4 + body); /* a reset mid-send is a refusal too */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        bool closed = false;
        int64_t wait_end = load_now_ns() + 5000000000LL;
        while (!closed && load_now_ns() < wait_end && !load_stop_requested) {
            int rc = poll(&pf, 1, (int)((wait_end - load_now_ns()) / 1000000) + 1);
            if (rc > 0)
                closed = peer_closed(fd);
            else if (rc < 0 && errno != EINTR)
                break;
        }
        if (closed)
            refused++;
        else
            not_refused++;
        close(fd);
    }
    free(frame);
    printf("abuse_client: mode=nest seconds=%.1f depth=%d frame_bytes=%zu attempts=%ld "
           "refused=%ld not_refused=%ld connect_failures=%ld\n",
           opt->seconds, opt->depth, body, attempts, refused, not_refused, connect_failures);
    return not_refused > 0 ? 1 : 0;
}

/* Prints usage. */
static void usage(FILE *out)
{
    fprintf(out,
            "usage: abuse_client --port N --mode slowloris|bigframe|pipeline|churn|agents|nest\n"
            "                    [--host ADDR] [--seconds T] [--connections C]\n"
            "                    [--requests N] [--rate R] [--length L] [--depth D]\n"
            "  slowloris  C connections (default 500) each send one byte a second\n"
            "  bigframe   R times a second (default 10) a frame header claiming 2 GiB\n"
            "  pipeline   N get_id requests (default 100000) written without reading\n"
            "  churn      R connect/close a second (default 1000)\n"
            "  agents     get_id back to back, each with a new agent of L bytes (default 255)\n"
            "  nest       R times a second (default 10) a frame nesting structs D deep\n"
            "             (default 200000: 800 KB, for a server with a raised max_frame_size)\n");
}

/* Parses a whole decimal integer in [min, max]; exits naming the flag otherwise. */
static long parse_flag(const char *flag, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "abuse_client: --%s %s: expected %ld..%ld\n", flag, s, min, max);
        exit(2);
    }
    return v;
}

/* Fills opt from argv; exits with a message naming the bad flag on error. */
static void parse_options(int argc, char **argv, abuse_options *opt)
{
    static const struct option longopts[] = {
        {"host", required_argument, NULL, 'h'},    {"port", required_argument, NULL, 'p'},
        {"mode", required_argument, NULL, 'm'},    {"seconds", required_argument, NULL, 's'},
        {"connections", required_argument, NULL, 'c'},
        {"requests", required_argument, NULL, 'n'}, {"rate", required_argument, NULL, 'r'},
        {"length", required_argument, NULL, 'l'},  {"depth", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'H'},          {NULL, 0, NULL, 0}};
    *opt = (abuse_options){.host = "127.0.0.1", .mode = -1, .connections = 500, .seconds = 10,
                           .requests = 100000, .rate = 0, .length = 255, .depth = 200000};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            opt->host = optarg;
            break;
        case 'p':
            opt->port = (int)parse_flag("port", optarg, 1, 65535);
            break;
        case 'm':
            if (strcmp(optarg, "slowloris") == 0)
                opt->mode = ABUSE_SLOWLORIS;
            else if (strcmp(optarg, "bigframe") == 0)
                opt->mode = ABUSE_BIGFRAME;
            else if (strcmp(optarg, "pipeline") == 0)
                opt->mode = ABUSE_PIPELINE;
            else if (strcmp(optarg, "churn") == 0)
                opt->mode = ABUSE_CHURN;
            else if (strcmp(optarg, "agents") == 0)
                opt->mode = ABUSE_AGENTS;
            else if (strcmp(optarg, "nest") == 0)
                opt->mode = ABUSE_NEST;
            else {
                fprintf(stderr, "abuse_client: --mode %s: expected slowloris, bigframe, "
                                "pipeline, churn, agents or nest\n", optarg);
                exit(2);
            }
            break;
        case 's':
            opt->seconds = (double)parse_flag("seconds", optarg, 1, 86400);
            break;
        case 'c':
            opt->connections = (int)parse_flag("connections", optarg, 1, 100000);
            break;
        case 'n':
            opt->requests = parse_flag("requests", optarg, 1, 100000000);
            break;
        case 'r':
            opt->rate = (int)parse_flag("rate", optarg, 1, 100000);
            break;
        case 'l':
            opt->length = (int)parse_flag("length", optarg, 1, 1000000);
            break;
        case 'd':
            opt->depth = (int)parse_flag("depth", optarg, 1, 5000000);
            break;
        case 'H':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (optind != argc || opt->port == 0 || (int)opt->mode < 0) {
        fprintf(stderr, "abuse_client: %s\n", optind != argc ? "unexpected argument"
                                              : opt->port == 0 ? "--port is required"
                                                               : "--mode is required");
        usage(stderr);
        exit(2);
    }
    if (opt->rate == 0)
        opt->rate = opt->mode == ABUSE_CHURN ? 1000 : 10;
}

int main(int argc, char **argv)
{
    abuse_options opt;
    parse_options(argc, argv, &opt);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    if (inet_pton(AF_INET, opt.host, &addr.sin_addr) != 1) {
        fprintf(stderr, "abuse_client: --host %s: expected a numeric IPv4 address\n", opt.host);
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)opt.connections + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    load_catch_signals();

    size_t req_len = 0;
    uint8_t *req = load_wire_encode("abuse", 0, &req_len);
    if (req == NULL)
        return 1;
    int status;
    switch (opt.mode) {
    case ABUSE_SLOWLORIS:
        status = run_slowloris(&opt, &addr, req, req_len);
        break;
    case ABUSE_BIGFRAME:
        status = run_bigframe(&opt, &addr);
        break;
    case ABUSE_PIPELINE:
        status = run_pipeline(&opt, &addr, req, req_len);
        break;
    case ABUSE_AGENTS:
        status = run_agents(&opt, &addr);
        break;
    case ABUSE_NEST:
        status = run_nest(&opt, &addr);
        break;
    default:
        status = run_churn(&opt, &addr);
        break;
    }
    free(req);
    return status;
}
