/*
 * Fork-join thread pool: created once, reused for every parallel region.
 * Workers spin briefly on a generation counter (decode issues thousands of
 * small regions per second, and a condition-variable wake-up costs tens of
 * microseconds), then sleep on a condition variable.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kvq.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 20000

struct kvq_pool {
    int nthreads; /* workers + the calling thread */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done_cv;
    atomic_uint generation;  /* bumped once per region */
    atomic_int next_task;    /* next task index to claim */
    atomic_int pending;      /* workers still inside the region */
    int sleepers;            /* workers waiting on `wake` (under mu) */
    int stop;                /* under mu */
    kvq_task_fn fn;
    void *arg;
    int ntasks;
};

typedef struct { kvq_pool *pool; int index; } worker_arg;

static void run_tasks(kvq_pool *p, int thread_index) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->ntasks) break;
        p->fn(p->arg, t, thread_index);
    }
}

static void *worker_main(void *varg) {
    worker_arg *wa = varg;
    kvq_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    /* generation is 0 when the pool is created: reading it here instead would
     * miss a first region started before this thread ran (deadlock) */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen && spins < SPIN_ITERS) {
            cpu_relax();
            spins++;
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen && !p->stop)
                pthread_cond_wait(&p->wake, &p->mu);
            p->sleepers--;
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = g;
        run_tasks(p, index);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

int kvq_pool_create(kvq_pool **out, int nthreads) {
    if (!out) return KVQ_ERR_NULL;
    if (nthreads < 1 || nthreads > 1024) return KVQ_ERR_INVALID_ARG;
    kvq_pool *p = calloc(1, sizeof *p);
    if (!p) return KVQ_ERR_NOMEM;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->next_task, 0);
    atomic_init(&p->pending, 0);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) { kvq_pool_free(p); return KVQ_ERR_NOMEM; }
    }
    for (int i = 1; i < nthreads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->nthreads = i; kvq_pool_free(p); return KVQ_ERR_NOMEM; }
        wa->pool = p;
        wa->index = i;
        if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->nthreads = i;
            kvq_pool_free(p);
            return KVQ_ERR_NOMEM;
        }
    }
    *out = p;
    return KVQ_OK;
}

void kvq_pool_free(kvq_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->nthreads; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    free(p->threads);
    free(p);
}

int kvq_pool_size(const kvq_pool *p) { return p ? p->nthreads : 1; }

int kvq_pool_run(kvq_pool *p, kvq_task_fn fn, void *arg, int ntasks) {
    if (!fn) return KVQ_ERR_NULL;
    if (ntasks < 0) return KVQ_ERR_INVALID_ARG;
    if (ntasks == 0) return KVQ_OK;
    if (!p || p->nthreads == 1 || ntasks == 1) {
        for (int t = 0; t < ntasks; t++) fn(arg, t, 0);
        return KVQ_OK;
    }
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->nthreads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, 0);
    /* wait for every worker to leave the region (they may still hold a task) */
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spins < SPIN_ITERS) {
        cpu_relax();
        spins++;
    }
    if (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    return KVQ_OK;
}
