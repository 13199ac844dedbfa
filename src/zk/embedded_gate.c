/* embedded_gate.c -- the gate (embedded_gate.h): the process a handle belongs to, told apart
 * across fork() by a word of the process's and, on the slow path, by getpid(); the threads'
 * slots sfz_stop looks through, and the membarrier that makes the id path's plain stores
 * visible to it. */
#define _GNU_SOURCE
#include "embedded_gate.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clocks.h"
#include "embedded_error.h"

#define SFZ_GATE_POLL_MS 1 /* how often sfz_gate_drain looks again */

atomic_uint sfz_fork_word;
void (*_Atomic sfz_gate_inside_hook)(const void *handle);
__thread sfz_gate_slot *sfz_gate_mine __attribute__((tls_model("initial-exec")));

static pthread_mutex_t sfz_gate_lock = PTHREAD_MUTEX_INITIALIZER; /* the slots' list */
static pthread_mutex_t sfz_claims_lock = PTHREAD_MUTEX_INITIALIZER; /* handles' owners */
static pthread_cond_t sfz_claims_done = PTHREAD_COND_INITIALIZER;    /* a claim ended */
static sfz_gate_slot *sfz_gate_slots;
static pthread_key_t sfz_gate_key;
static pthread_once_t sfz_gate_once = PTHREAD_ONCE_INIT;
static int sfz_gate_rc;        /* of the set-up: 0, or why it failed */
static _Atomic pid_t sfz_process_pid;   /* the process the gate is settled in */
static atomic_uint sfz_process_depth;   /* forks between the first process and that one */

/* Settles the gate in this process, if it is not yet: a fork()ed child, at its first look
 * (the library's child handler, or a call from a program's own child handler, which runs
 * before it). The child has one thread then: the lock the prepare handler took is made
 * anew, the slots of the parent's other threads (which do not exist here) name no handle,
 * and the word moves on for good, so every handle made before the fork takes the slow path
 * here. */
static void sfz_gate_settle(void)
{
    pid_t me = getpid();
    if (atomic_load_explicit(&sfz_process_pid, memory_order_acquire) == me)
        return;
    pthread_mutex_init(&sfz_gate_lock, NULL);
    pthread_mutex_init(&sfz_claims_lock, NULL);
    pthread_cond_init(&sfz_claims_done, NULL);
    for (sfz_gate_slot *s = sfz_gate_slots; s != NULL; s = s->next)
        atomic_store_explicit(&s->inside, NULL, memory_order_relaxed);
    unsigned word = atomic_load_explicit(&sfz_fork_word, memory_order_relaxed);
    atomic_store_explicit(&sfz_fork_word, (word | SFZ_FORKS_UNDER_WAY) + 1,
                          memory_order_relaxed);
    atomic_fetch_add_explicit(&sfz_process_depth, 1, memory_order_relaxed);
    atomic_store_explicit(&sfz_process_pid, me, memory_order_release);
}

/* Before fork(), in the parent: from now until sfz_gate_parent, every handle's word differs
 * (its calls take the slow path, which finds them this process's), and so does the child's
 * copy of it, whatever runs there first. The slots' list is held across the fork, so the
 * child's copy of it is whole. */
static void sfz_gate_prepare(void)
{
    atomic_fetch_add_explicit(&sfz_fork_word, 1, memory_order_relaxed);
    pthread_mutex_lock(&sfz_gate_lock);
}

static void sfz_gate_parent(void)
{
    pthread_mutex_unlock(&sfz_gate_lock);
    atomic_fetch_sub_explicit(&sfz_fork_word, 1, memory_order_relaxed);
}

static void sfz_gate_child(void)
{
    sfz_gate_settle();
}

/* A thread ends: its slot goes (it is inside no handle then). */
static void sfz_gate_slot_free(void *p)
{
    sfz_gate_slot *s = p;
    pthread_mutex_lock(&sfz_gate_lock);
    for (sfz_gate_slot **at = &sfz_gate_slots; *at != NULL; at = &(*at)->next)
        if (*at == s) {
            *at = s->next;
            break;
        }
    pthread_mutex_unlock(&sfz_gate_lock);
    sfz_gate_mine = NULL;
    free(s);
}

static void sfz_gate_setup(void)
{
    atomic_store_explicit(&sfz_process_pid, getpid(), memory_order_release);
    sfz_gate_rc = pthread_key_create(&sfz_gate_key, sfz_gate_slot_free);
    if (sfz_gate_rc == 0)
        sfz_gate_rc = pthread_atfork(sfz_gate_prepare, sfz_gate_parent, sfz_gate_child);
}

bool sfz_gate_watch_forks(int *rc)
{
    pthread_once(&sfz_gate_once, sfz_gate_setup);
    *rc = sfz_gate_rc;
    return sfz_gate_rc == 0;
}

void sfz_gate_owner_here(sfz_owner *owner, unsigned *word)
{
    sfz_gate_settle();
    owner->pid = atomic_load_explicit(&sfz_process_pid, memory_order_acquire);
    owner->depth = atomic_load_explicit(&sfz_process_depth, memory_order_relaxed);
    *word = atomic_load_explicit(&sfz_fork_word, memory_order_relaxed) & ~SFZ_FORKS_UNDER_WAY;
}

bool sfz_gate_owned_here(const sfz_owner *owner)
{
    return owner->pid == atomic_load_explicit(&sfz_process_pid, memory_order_acquire) &&
           owner->depth == atomic_load_explicit(&sfz_process_depth, memory_order_relaxed);
}

bool sfz_gate_foreign(const sfz_owner *owner)
{
    sfz_gate_lock_claims();
    bool foreign = !sfz_gate_owned_here(owner);
    sfz_gate_unlock_claims();
    return foreign;
}

void sfz_gate_lock_claims(void)
{
    sfz_gate_settle();
    pthread_mutex_lock(&sfz_claims_lock);
}

void sfz_gate_unlock_claims(void)
{
    pthread_mutex_unlock(&sfz_claims_lock);
}

void sfz_gate_wait_claims(void)
{
    pthread_cond_wait(&sfz_claims_done, &sfz_claims_lock);
}

void sfz_gate_claims_changed(void)
{
    pthread_cond_broadcast(&sfz_claims_done);
}

bool sfz_gate_register(void)
{
    int rc;
    return sfz_gate_watch_forks(&rc) &&
           syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

sfz_gate_slot *sfz_gate_slot_new(void)
{
    sfz_gate_slot *s = aligned_alloc(_Alignof(sfz_gate_slot), sizeof *s); /* its own line */
    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof *s);
    if (pthread_setspecific(sfz_gate_key, s) != 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&sfz_gate_lock);
    s->next = sfz_gate_slots;
    sfz_gate_slots = s;
    pthread_mutex_unlock(&sfz_gate_lock);
    sfz_gate_mine = s;
    return s;
}

/* True while some thread's slot names handle. */
static bool sfz_gate_busy(const void *handle)
{
    bool busy = false;
    pthread_mutex_lock(&sfz_gate_lock);
    for (sfz_gate_slot *s = sfz_gate_slots; s != NULL && !busy; s = s->next)
        busy = atomic_load_explicit(&s->inside, memory_order_acquire) == handle;
    pthread_mutex_unlock(&sfz_gate_lock);
    return busy;
}

int sfz_gate_drain(const void *handle)
{
    /* Once it returns, every thread has run a full barrier: a slot stored before it is seen
     * below, and a thread that stores its slot after it sees the stopping flag. */
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
        return errno;
    while (sfz_gate_busy(handle))
        sf_clocks_sleep_ms(SFZ_GATE_POLL_MS);
    return 0;
}

int sfz_gate_refuse(pid_t made_by, sfz_error *err)
{
    return sfz_fail(err, SFZ_ERR_FORKED, "this handle was started by pid %ld; this process "
                    "(pid %ld) is a fork() of it and gets nothing from it: start a handle of "
                    "its own after fork() (or give the handle on_fork = SFZ_ON_FORK_CLAIM)",
                    (long)made_by, (long)getpid());
}
