/* http helpers that need no socket: the constant-time key comparison. */
#include <criterion/criterion.h>
#include <string.h>

#include "http/server.h"

Test(api_http, key_equal_exact_only)
{
    cr_assert(http_key_equal("sk-abc", 6, "sk-abc"));
    cr_assert(!http_key_equal("sk-abd", 6, "sk-abc"));
    cr_assert(!http_key_equal("sk-ab", 5, "sk-abc"), "a prefix is not the key");
    cr_assert(!http_key_equal("sk-abcd", 7, "sk-abc"), "nor is an extension");
    cr_assert(!http_key_equal("", 0, "sk-abc"));
    cr_assert(!http_key_equal("sk-abc\0x", 8, "sk-abc"), "embedded NUL does not truncate");
}
