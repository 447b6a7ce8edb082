#include <criterion/criterion.h>
#include <string.h>

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
