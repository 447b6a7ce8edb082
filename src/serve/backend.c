#include "serve/backend.h"

#include "base/log.h"

void backend_run_job(void *arg, struct job *job)
{
    struct backend *b = arg;
    struct err e;
    err_clear(&e);
    if (b->ops->generate(b, job, &e) != 0) {
        if (pipe_cancelled(job->pipe)) return; /* client gone: nobody to tell */
        log_warn("generate failed: %s", e.msg);
        if (job->sink.error) job->sink.error(job->sink.ctx, &e);
    }
    job->t_end = mono_seconds();
}
