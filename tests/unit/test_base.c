#include <criterion/criterion.h>
#include <sys/mman.h>
#include <errno.h>
#include <string.h>

#include "mem_testlib.h"
#include "base/mem.h"
#include "base/buf.h"
#include "base/err.h"

Test(base, buf_grows_and_terminates)
{
    struct buf b = {0};
    for (int i = 0; i < 1000; i++) cr_assert_eq(buf_printf(&b, "%d,", i % 10), 0);
    cr_assert_eq(b.len, 2000);
    cr_assert_eq(b.data[b.len], 0);
    cr_assert_eq(strncmp(b.data, "0,1,2,", 6), 0);
    buf_free(&b);
}

Test(base, err_set_and_wrap)
{
    struct err e;
    cr_assert_eq(err_set_param(&e, ERR_INVALID, "top_p", "must be in [0,1], got %g", 2.0), -1);
    err_wrap(&e, "request");
    cr_assert_str_eq(e.msg, "request: must be in [0,1], got 2");
    cr_assert_str_eq(e.param, "top_p");
    cr_assert_str_eq(err_code_name(e.code), "invalid");
}

/* ---- base/hash FNV-1a, base/utf8, base/cpu ---- */
#include "base/cpu.h"
#include "base/hash.h"
#include "base/utf8.h"

Test(base_hash, fnv1a64_known_values)
{
    /* the published FNV-1a 64 test vectors: the chat-template fingerprints depend on them */
    cr_assert_eq(hash_fnv1a64("", 0), 0xcbf29ce484222325ull);
    cr_assert_eq(hash_fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
    cr_assert_eq(hash_fnv1a64("foobar", 6), 0x85944171f73967e8ull);
    cr_assert_eq(hash_fnv1a64_str("foobar"), 0x85944171f73967e8ull);
}

Test(base_utf8, encode_each_length)
{
    char o[UTF8_MAX];
    cr_assert_eq(utf8_encode(0x41, o), 1);
    cr_assert_eq(o[0], 'A');
    cr_assert_eq(utf8_encode(0xE9, o), 2);
    cr_assert_eq(memcmp(o, "\xC3\xA9", 2), 0);
    cr_assert_eq(utf8_encode(0x20AC, o), 3);
    cr_assert_eq(memcmp(o, "\xE2\x82\xAC", 3), 0);
    cr_assert_eq(utf8_encode(0x1F600, o), 4);
    cr_assert_eq(memcmp(o, "\xF0\x9F\x98\x80", 4), 0);
    cr_assert_eq(utf8_encode(0x7FF, o), 2);
    cr_assert_eq(utf8_encode(0xFFFF, o), 3);
    cr_assert_eq(utf8_incomplete_tail("a\xE2\x82", 3), 2);
    cr_assert_eq(utf8_incomplete_tail("a\xE2\x82\xAC", 4), 0);
}

Test(base_cpu, probe_is_consistent)
{
    const struct cpu_features *c = cpu_features();
    cr_assert_eq(c, cpu_features()); /* probed once */
    cr_assert_eq(cpu_has_avx2_fma(), c->avx2 && c->fma);
#if defined(__x86_64__)
    cr_assert_eq(c->avx2, (bool)__builtin_cpu_supports("avx2"));
#endif
}

Test(base_cpu, cpuid_flags_agree_with_the_compiler)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    /* the flags read by CPUID directly (clang's builtin does not know them) against GCC's */
    const struct cpu_features *c = cpu_features();
    cr_assert_eq(c->f16c, (bool)__builtin_cpu_supports("f16c"));
    cr_assert_eq(c->bmi2, (bool)__builtin_cpu_supports("bmi2"));
    cr_assert_eq(c->amx_tile, (bool)__builtin_cpu_supports("amx-tile"));
#endif
}

/* mem_populate: a fresh private mapping's pages resident after it, contents unchanged; a
 * read-only mapping refused (-1), so the callers fall back to faulting pages in. */
Test(mem, populate_makes_pages_resident_or_says_it_cannot)
{
    const size_t n = 64 * 4096;
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    size_t np;
    cr_assert_eq(resident_pages(p, n, &np), 0, "pages resident before");
    cr_assert_eq(mem_populate(p + 100, n - 200), 0, "%s", strerror(errno));
    cr_assert_eq(resident_pages(p, n, &np), 64, "not every page resident");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(p[i], 0);
    cr_assert_eq(mem_populate(p, 0), 0);
    munmap(p, n);
    char *r = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(r, MAP_FAILED);
    cr_assert_eq(mem_populate(r, n), -1);
    munmap(r, n);
}
