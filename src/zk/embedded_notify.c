/* embedded_notify.c -- a handle's callbacks to the application, made from a thread of their
 * own, in order (see embedded_notify.h): a bounded queue under a mutex, which the registry's
 * thread, the skew check's and the application's own only ever append to. */
#define _POSIX_C_SOURCE 200809L /* pthread_sigmask, through common/threads.h */
#include "embedded_notify.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/threads.h"

/* One queued call: a state, or a log line. */
typedef struct sfz_note {
    bool is_state;
    union {
        sfz_state state;
        struct {
            char level[16];
            char text[SFZ_ERROR_MAX];
        } line;
    } u;
} sfz_note;

struct sfz_notifier {
    sfz_log_fn log;
    void *log_ctx;
    sfz_state_fn on_state;
    void *state_ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sfz_note notes[SFZ_NOTIFY_QUEUE]; /* a ring: count of them from head on */
    int head, count;
    unsigned long dropped; /* log lines dropped since the last one said so */
    bool stop;
    pid_t pid;             /* of the process whose thread this is */
    pthread_t thread;
};

/* The i-th queued note (0 = the oldest). Lock held. */
static sfz_note *sfz_note_at(sfz_notifier *n, int i)
{
    return &n->notes[(n->head + i) % SFZ_NOTIFY_QUEUE];
}

static void sfz_notify_line(sfz_notifier *n, const char *level, const char *text)
{
    if (n->log != NULL)
        n->log(n->log_ctx, level, text);
    else
        fprintf(stderr, "snowflake-zk %s: %s\n", level, text);
}

/* The thread: takes the oldest note and makes its call outside the lock, until stopped with
 * nothing left. */
static void *sfz_notify_thread(void *arg)
{
    sfz_notifier *n = arg;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        while (n->count == 0 && n->dropped == 0 && !n->stop)
            pthread_cond_wait(&n->cv, &n->mu);
        if (n->count == 0 && n->dropped == 0)
            break;
        unsigned long dropped = n->dropped;
        n->dropped = 0;
        bool have = n->count > 0;
        sfz_note note;
        if (have) {
            note = *sfz_note_at(n, 0);
            n->head = (n->head + 1) % SFZ_NOTIFY_QUEUE;
            n->count--;
        }
        pthread_mutex_unlock(&n->mu);
        if (dropped > 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "%lu log lines dropped: the log sink took longer than "
                     "they came (at most %d wait)", dropped, SFZ_NOTIFY_QUEUE);
            sfz_notify_line(n, "warning", msg);
        }
        if (have && note.is_state && n->on_state != NULL)
            n->on_state(n->state_ctx, &note.u.state);
        else if (have && !note.is_state)
            sfz_notify_line(n, note.u.line.level, note.u.line.text);
        pthread_mutex_lock(&n->mu);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

sfz_notifier *sfz_notifier_start(sfz_log_fn log, void *log_ctx, sfz_state_fn on_state,
                                 void *state_ctx)
{
    sfz_notifier *n = calloc(1, sizeof *n);
    if (n == NULL)
        return NULL;
    n->log = log;
    n->log_ctx = log_ctx;
    n->on_state = on_state;
    n->state_ctx = state_ctx;
    n->pid = getpid();
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    if (sf_threads_start(&n->thread, NULL, sfz_notify_thread, n) != 0) {
        pthread_cond_destroy(&n->cv);
        pthread_mutex_destroy(&n->mu);
        free(n);
        return NULL;
    }
    return n;
}

/* A free note at the tail, or NULL when full. Lock held. */
static sfz_note *sfz_note_append(sfz_notifier *n)
{
    if (n->count == SFZ_NOTIFY_QUEUE)
        return NULL;
    return sfz_note_at(n, n->count++);
}

void sfz_notifier_log(sfz_notifier *n, const char *level, const char *line)
{
    pthread_mutex_lock(&n->mu);
    sfz_note *note = sfz_note_append(n);
    if (note != NULL) {
        note->is_state = false;
        snprintf(note->u.line.level, sizeof note->u.line.level, "%s", level);
        snprintf(note->u.line.text, sizeof note->u.line.text, "%s", line);
    } else {
        n->dropped++;
    }
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

void sfz_notifier_state(sfz_notifier *n, const sfz_state *state)
{
    pthread_mutex_lock(&n->mu);
    sfz_note *note = sfz_note_append(n);
    /* Full: the newest log line gives way (the later ones move up), or else the newest
     * state, which this one supersedes. */
    for (int i = n->count - 1; note == NULL && i >= 0; i--) {
        if (sfz_note_at(n, i)->is_state)
            continue;
        for (int k = i; k < n->count - 1; k++)
            *sfz_note_at(n, k) = *sfz_note_at(n, k + 1);
        note = sfz_note_at(n, n->count - 1);
        n->dropped++;
    }
    if (note == NULL)
        note = sfz_note_at(n, n->count - 1);
    note->is_state = true;
    note->u.state = *state;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

void sfz_notifier_stop(sfz_notifier *n)
{
    if (n == NULL)
        return;
    if (n->pid == getpid()) {
        pthread_mutex_lock(&n->mu);
        n->stop = true;
        pthread_cond_signal(&n->cv);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->thread, NULL);
        pthread_cond_destroy(&n->cv);
        pthread_mutex_destroy(&n->mu);
    }
    /* In a child, the parent's thread may have been waiting on cv at the fork: glibc's
     * pthread_cond_destroy would wait for that waiter, which does not exist here, for ever.
     * Its memory is freed as it is. */
    free(n);
}
