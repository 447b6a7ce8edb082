/* buf — a growable byte buffer (always NUL-terminated past len, so it can hold C strings). */
#ifndef LMS_BASE_BUF_H
#define LMS_BASE_BUF_H

#include <stddef.h>

struct buf {
    char *data;
    size_t len, cap;
};

/* All return 0 on success, -1 on allocation failure (the buffer is left unchanged). */
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(struct buf *b); /* len = 0, keeps memory */
void buf_free(struct buf *b);
/* Hands the storage to the caller (who free()s it) and resets b. */
char *buf_steal(struct buf *b);

#endif
