#include "serve/backend.h"

#include "base/log.h"

void backend_run_job(void *arg, struct job *job)
{
    struct backend *b = arg;
    struct err e;
    err_clear(&e);
    int rc = b->ops->generate(b, job, &e);
    /* Timing is final before the pipe ends: readers look at it once they saw the end. */
    if (!job->t_end) job->t_end = mono_seconds();
    if (rc != 0 && !pipe_cancelled(job->pipe)) {
        log_warn("generate failed: %s", e.msg);
        if (job->sink.error) job->sink.error(job->sink.ctx, &e);
    }
    /* a cancelled job's pipe is failed by the worker loop */
}
