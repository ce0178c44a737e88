/*
 * Fork-join thread pool: created once, reused for every parallel region.
 * Workers spin briefly on a generation counter (decode issues thousands of
 * small regions per second, and a condition-variable wake-up costs tens of
 * microseconds), then sleep on a condition variable.
 *
 * Tasks are claimed from one 64-bit word, (generation << 32) | next task, by
 * compare-and-swap, and the caller waits for the tasks to be *done*, not for
 * every worker to check in: on a busy machine a descheduled worker does not
 * hold up a region (the caller and the running workers take all its tasks),
 * which matters when a decode step is a few hundred regions. A worker that
 * wakes up late reads the word, sees another generation or no task left,
 * and goes back to waiting. Before a region's fields are rewritten the word
 * is closed (task index past any count), so a stale worker can never claim
 * a task of the next region with the previous region's count.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "kvq.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 20000      /* pause-spins before a worker sleeps */
#define WAIT_SPIN_ITERS 2000  /* caller: pause-spins, then yields, before sleeping */
#define WAIT_YIELDS 200
#define CLOSED 0xffffffffu    /* task index of a finished region */

struct kvq_pool {
    int nthreads; /* workers + the calling thread */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done_cv;
    atomic_uint_fast64_t work; /* (generation << 32) | next task index */
    atomic_int done;           /* tasks finished in the current region */
    int sleepers;              /* workers waiting on `wake` (under mu) */
    int caller_sleeping;       /* caller waiting on `done_cv` (under mu) */
    int stop;                  /* under mu */
    /* the current region; read by workers only through a validated claim */
    _Atomic(kvq_task_fn) fn;
    _Atomic(void *) arg;
    atomic_int ntasks;
};

typedef struct { kvq_pool *pool; int index; } worker_arg;

static uint32_t gen_of(uint64_t w) { return (uint32_t)(w >> 32); }

/* Claims and runs tasks of generation g until none is left. */
static void run_tasks(kvq_pool *p, uint32_t g, int thread_index) {
    for (;;) {
        uint64_t w = atomic_load_explicit(&p->work, memory_order_acquire);
        if (gen_of(w) != g) return;
        uint32_t idx = (uint32_t)w;
        int n = atomic_load_explicit(&p->ntasks, memory_order_relaxed);
        if (idx >= (uint32_t)n) return;
        kvq_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
        /* the fields read above belong to generation g if the word did not change */
        if (!atomic_compare_exchange_weak_explicit(&p->work, &w, w + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        fn(arg, (int)idx, thread_index);
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == n && thread_index != 0) {
            pthread_mutex_lock(&p->mu);
            if (p->caller_sleeping) pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *varg) {
    worker_arg *wa = varg;
    kvq_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    uint32_t seen = 0; /* generation at creation (regions start at 1) */
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = gen_of(atomic_load_explicit(&p->work, memory_order_acquire))) == seen && spins < SPIN_ITERS) {
            cpu_relax();
            spins++;
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while ((g = gen_of(atomic_load_explicit(&p->work, memory_order_acquire))) == seen && !p->stop)
                pthread_cond_wait(&p->wake, &p->mu);
            p->sleepers--;
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = g;
        run_tasks(p, g, index);
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
    atomic_init(&p->work, (uint64_t)CLOSED); /* generation 0, closed */
    atomic_init(&p->done, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    atomic_init(&p->ntasks, 0);
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
    /* the previous region is closed (its word's index is CLOSED): stale
     * workers cannot claim while the fields change */
    uint32_t g = gen_of(atomic_load_explicit(&p->work, memory_order_relaxed)) + 1;
    if (g == 0) g = 1; /* generation 0 is the workers' initial value */
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->ntasks, ntasks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->work, (uint64_t)g << 32, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, g, 0);
    /* wait until every task is done (some may still run on workers) */
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < ntasks) {
        if (spins < WAIT_SPIN_ITERS) cpu_relax();
        else if (spins < WAIT_SPIN_ITERS + WAIT_YIELDS) sched_yield();
        else break;
        spins++;
    }
    if (atomic_load_explicit(&p->done, memory_order_acquire) < ntasks) {
        pthread_mutex_lock(&p->mu);
        p->caller_sleeping = 1;
        while (atomic_load_explicit(&p->done, memory_order_acquire) < ntasks) pthread_cond_wait(&p->done_cv, &p->mu);
        p->caller_sleeping = 0;
        pthread_mutex_unlock(&p->mu);
    }
    atomic_store_explicit(&p->work, ((uint64_t)g << 32) | CLOSED, memory_order_release);
    return KVQ_OK;
}
