/* A parallel for-loop over work items.
 *
 * Threads are started per call: an attention call is milliseconds to
 * seconds long, so the ~50 us of thread start-up is noise, and nothing
 * outlives the call (no pool to leak across Check's forks). Items are handed
 * out through an atomic counter; which thread runs an item never matters
 * because every item writes its own disjoint outputs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu/cpu.h"

typedef struct pool_job {
    const fattn_geom *g;
    cpu_item_fn fn;
    void *ctx;
    int64_t n;
    atomic_llong next;
    /* first failure by item index, so the reported error is deterministic */
    pthread_mutex_t lock;
    int64_t fail_item;
    fattn_status fail_status;
    char fail_msg[512];
} pool_job;

static void pool_record_failure(pool_job *job, int64_t item, fattn_status st)
{
    pthread_mutex_lock(&job->lock);
    if (job->fail_item < 0 || item < job->fail_item) {
        job->fail_item = item;
        job->fail_status = st;
        snprintf(job->fail_msg, sizeof job->fail_msg, "%s", fattn_last_error());
    }
    pthread_mutex_unlock(&job->lock);
}

static void *pool_worker(void *arg)
{
    pool_job *job = arg;
    cpu_scratch scr;
    fattn_status st = fattn__cpu_scratch_init(&scr, job->g);
    if (st != FATTN_OK) {
        pool_record_failure(job, 0, st);
        return NULL;
    }
    for (;;) {
        int64_t item = atomic_fetch_add(&job->next, 1);
        if (item >= job->n)
            break;
        st = job->fn(job->ctx, &scr, item);
        if (st != FATTN_OK)
            pool_record_failure(job, item, st);
    }
    fattn__cpu_scratch_free(&scr);
    return NULL;
}

int fattn__cpu_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 256)
        n = 256;
    return (int)n;
}

fattn_status fattn__cpu_parallel_for(int threads, const fattn_geom *g, int64_t n,
                              cpu_item_fn fn, void *ctx)
{
    if (n <= 0)
        return FATTN_OK;
    if (threads < 1)
        threads = 1;
    if (threads > n)
        threads = (int)n;
    pool_job job;
    job.g = g;
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    atomic_init(&job.next, 0);
    pthread_mutex_init(&job.lock, NULL);
    job.fail_item = -1;
    job.fail_status = FATTN_OK;
    job.fail_msg[0] = '\0';

    pthread_t tid[256];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tid[started], NULL, pool_worker, &job) != 0)
            break; /* run with fewer threads: results do not change */
        started++;
    }
    pool_worker(&job);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&job.lock);
    if (job.fail_item >= 0)
        return fattn_error(job.fail_status, "%s", job.fail_msg);
    return FATTN_OK;
}
