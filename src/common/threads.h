/* threads.h -- the threads a library starts in a program's process take none of the signals
 * sent to the process. The kernel hands such a signal (kill, a terminal's Ctrl-C, a pre-fork
 * server's master stopping its workers) to any thread that does not block it, and a
 * program's handler may need what only its own threads hold: uWSGI's stop handler exits, and
 * the exit then waits for the Python lock its worker's main thread keeps, for ever when the
 * handler runs on a library's thread. So every thread the libraries start (and the ZooKeeper
 * client's, started inside zookeeper_init) blocks every signal but the faults (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS), which the kernel sends to the thread that caused
 * them. Plain C, POSIX threads (an includer asks for POSIX.1-2008, for sigset_t); inline, as
 * clocks.h: a session's opening calls it, and the claim's path stays in its own files. */
#ifndef SF_THREADS_H
#define SF_THREADS_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>

/* Blocks the signals in the calling thread, its mask before kept in saved, for a call into
 * a library that starts threads of its own (they inherit the mask); sf_threads_unblock
 * puts saved back. pthread_sigmask cannot fail here: the set and `how` are valid (glibc
 * leaves out the signals it keeps for itself). */
static inline void sf_threads_block(sigset_t *saved)
{
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    sigset_t all;
    sigfillset(&all);
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
        sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_BLOCK, &all, saved);
}

static inline void sf_threads_unblock(const sigset_t *saved)
{
    pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/* pthread_create, the new thread blocking the process's signals: pthread_create's result. */
static inline int sf_threads_start(pthread_t *thread, const pthread_attr_t *attr,
                                   void *(*run)(void *), void *arg)
{
    sigset_t saved;
    sf_threads_block(&saved);
    int rc = pthread_create(thread, attr, run, arg);
    sf_threads_unblock(&saved);
    return rc;
}

#endif /* SF_THREADS_H */
