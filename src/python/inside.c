/* inside.c -- see inside.h. */
#include "inside.h"

void sfpy_inside_init(sfpy_inside *in)
{
    pthread_mutex_init(&in->lock, NULL);
    pthread_cond_init(&in->changed, NULL);
    in->count = 0;
    in->forks = sfpy_forks_now();
}

void sfpy_inside_enter(sfpy_inside *in)
{
    sfpy_inside_here(in);
    pthread_mutex_lock(&in->lock);
    in->count++;
    pthread_mutex_unlock(&in->lock);
}

void sfpy_inside_leave(sfpy_inside *in)
{
    pthread_mutex_lock(&in->lock);
    if (--in->count == 0)
        pthread_cond_broadcast(&in->changed);
    pthread_mutex_unlock(&in->lock);
}

void sfpy_inside_wait_idle(sfpy_inside *in)
{
    sfpy_inside_here(in);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&in->lock);
    while (in->count > 0)
        pthread_cond_wait(&in->changed, &in->lock);
    pthread_mutex_unlock(&in->lock);
    Py_END_ALLOW_THREADS
}

void sfpy_inside_bump(sfpy_inside *in, unsigned *counter)
{
    sfpy_inside_here(in);
    pthread_mutex_lock(&in->lock);
    (*counter)++;
    pthread_cond_broadcast(&in->changed);
    pthread_mutex_unlock(&in->lock);
}

void sfpy_inside_wait_bump(sfpy_inside *in, const unsigned *counter, unsigned seen)
{
    sfpy_inside_here(in);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&in->lock);
    while (*counter == seen)
        pthread_cond_wait(&in->changed, &in->lock);
    pthread_mutex_unlock(&in->lock);
    Py_END_ALLOW_THREADS
}

void sfpy_inside_destroy(sfpy_inside *in)
{
    if (in->forks != sfpy_forks_now())
        return; /* the parent's, copied: never used here, and maybe held at the fork */
    pthread_mutex_destroy(&in->lock);
    pthread_cond_destroy(&in->changed);
}
