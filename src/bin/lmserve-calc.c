/* lmserve-calc — nanochat's calculator tool (engine/text/calc.h) on each stdin line.
 *
 *   lmserve-calc < EXPRS      per line: "=<TAB>answer" or "-" (no answer: nothing is forced)
 *
 * Lines are hex-encoded bytes with --hex (any byte can be tested). For tests
 * (tests/suites/46-nanochat-chat.sh compares it with Python's eval behind nanochat's gate). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/text/calc.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int main(int argc, char **argv)
{
    bool hex = argc == 2 && !strcmp(argv[1], "--hex");
    if (argc > 2 || (argc == 2 && !hex)) {
        fprintf(stderr, "usage: lmserve-calc [--hex] < lines\n");
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    struct buf out = {0};
    int rc = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        size_t n = (size_t)len;
        if (hex) {
            if (n % 2) {
                fprintf(stderr, "lmserve-calc: odd hex length\n");
                rc = 1;
                break;
            }
            for (size_t k = 0; k < n; k += 2) {
                int hi = hexval(line[k]), lo = hexval(line[k + 1]);
                if (hi < 0 || lo < 0) {
                    fprintf(stderr, "lmserve-calc: bad hex\n");
                    rc = 1;
                    goto done;
                }
                line[k / 2] = (char)(hi * 16 + lo);
            }
            n /= 2;
        }
        buf_reset(&out);
        int r = calc_eval(line, n, &out);
        if (r < 0) {
            fprintf(stderr, "lmserve-calc: out of memory\n");
            rc = 1;
            break;
        }
        if (r == 0) puts("-");
        else printf("=\t%.*s\n", (int)out.len, out.data ? out.data : "");
    }
done:
    free(line);
    buf_free(&out);
    return rc;
}
