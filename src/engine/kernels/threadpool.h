/* threadpool — persistent workers for fork-join parallelism inside one forward pass.
 *
 * tp_run(pool, fn, ctx) calls fn(ctx, ith, nth) on every thread (the caller is thread 0) and
 * returns when all are done. Workers spin briefly, then sleep on a futex/condvar between jobs.
 * Only one thread (the owner, e.g. the inference worker) may call tp_run at a time. */
#ifndef LMS_ENGINE_THREADPOOL_H
#define LMS_ENGINE_THREADPOOL_H

typedef void (*tp_fn)(void *ctx, int ith, int nth);
struct threadpool;

struct threadpool *tp_new(int n_threads); /* n_threads >= 1; NULL on failure */
void tp_free(struct threadpool *tp);
int tp_size(const struct threadpool *tp);
void tp_run(struct threadpool *tp, tp_fn fn, void *ctx);
/* Like tp_run for an fn that takes its work from a shared counter until none is left (any thread
 * can do any part): workers join only while the caller is still inside fn, and the caller waits
 * only for the workers that joined. So a worker that is descheduled (busy machine) never holds
 * the caller up. fn may run on fewer than nth threads; each ith at most once. */
void tp_run_dynamic(struct threadpool *tp, tp_fn fn, void *ctx);
int tp_default_threads(void); /* physical cores */

#endif
