/* embedded_gate.c -- the threads' slots sfz_stop looks through, and the membarrier that makes
 * the id path's plain stores visible to it (embedded_gate.h). */
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

#define SFZ_GATE_POLL_MS 1 /* how often sfz_gate_drain looks again */

__thread sfz_gate_slot *sfz_gate_mine __attribute__((tls_model("initial-exec")));

static pthread_mutex_t sfz_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static sfz_gate_slot *sfz_gate_slots;
static pthread_key_t sfz_gate_key;
static pthread_once_t sfz_gate_once = PTHREAD_ONCE_INIT;
static bool sfz_gate_keyed;

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

/* Around fork(): the child gets the list unlocked, and the slots of the parent's other
 * threads (which do not exist there) name no handle. */
static void sfz_gate_prepare(void)
{
    pthread_mutex_lock(&sfz_gate_lock);
}

static void sfz_gate_parent(void)
{
    pthread_mutex_unlock(&sfz_gate_lock);
}

static void sfz_gate_child(void)
{
    for (sfz_gate_slot *s = sfz_gate_slots; s != NULL; s = s->next)
        atomic_store_explicit(&s->inside, NULL, memory_order_relaxed);
    pthread_mutex_unlock(&sfz_gate_lock);
}

static void sfz_gate_setup(void)
{
    sfz_gate_keyed = pthread_key_create(&sfz_gate_key, sfz_gate_slot_free) == 0 &&
                     pthread_atfork(sfz_gate_prepare, sfz_gate_parent, sfz_gate_child) == 0;
}

bool sfz_gate_register(void)
{
    pthread_once(&sfz_gate_once, sfz_gate_setup);
    return sfz_gate_keyed &&
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
