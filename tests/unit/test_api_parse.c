/* api decoders: field mapping, defaults, and the rejection list (R-MAP-1..4, R-ANT-1). */
#include <criterion/criterion.h>
#include <string.h>

#include "api/api.h"

static struct backend be;
static struct api_ctx ctx = {.backend = &be};

static void setup(void)
{
    memset(&be, 0, sizeof be);
    be.caps = (struct backend_caps){.think = true, .tools = true, .stop = true, .system_role = true};
    strcpy(be.model_id, "test-model");
    be.max_tokens_cap = 100;
    be.defaults = (struct sampler_params){.temperature = 0.7f, .top_k = 20, .top_p = 0.8f,
                                          .repeat_penalty = 1, .repeat_last_n = 64};
    be.defaults_think = be.defaults;
    be.defaults_think.temperature = 0.6f;
    be.defaults_think.top_p = 0.95f;
}

static int parse(enum dialect d, const char *body, struct request *r, struct err *e)
{
    request_init(r);
    err_clear(e);
    return api_parse(d, &ctx, body, strlen(body), r, e);
}

TestSuite(api_parse, .init = setup);

Test(api_parse, chat_basic_fields_and_defaults)
{
    struct request r;
    struct err e;
    cr_assert_eq(parse(DIALECT_CHAT,
                       "{\"model\":\"x\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                       "{\"type\":\"text\",\"text\":\"b\"}]}],\"stop\":\"END\",\"seed\":7,"
                       "\"max_completion_tokens\":500,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"user\":\"u\",\"store\":false}",
                       &r, &e),
                 0, "%s", e.msg);
    cr_assert_eq(r.n_msgs, 2);
    cr_assert_eq(r.msgs[0].role, CHAT_SYSTEM);
    cr_assert_str_eq(r.msgs[1].content, "a\nb");
    cr_assert_eq(r.n_stop, 1);
    cr_assert_str_eq(r.stop[0], "END");
    cr_assert_eq(r.sp.seed, 7);
    cr_assert_eq(r.max_tokens, 100, "clamped to the server cap");
    cr_assert(r.stream && r.include_usage);
    cr_assert_float_eq(r.sp.temperature, 0.7f, 1e-6, "family default, not OpenAI's 1.0");
    cr_assert_eq(r.sp.top_k, 20);
    cr_assert_str_eq(r.model, "test-model");
    cr_assert_eq(strncmp(r.id, "chatcmpl-", 9), 0);
    request_free(&r);
}

Test(api_parse, chat_reasoning_effort_and_defaults_switch)
{
    struct request r;
    struct err e;
    cr_assert_eq(parse(DIALECT_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                     "\"reasoning_effort\":\"high\"}", &r, &e), 0);
    cr_assert(r.reasoning);
    cr_assert_float_eq(r.sp.temperature, 0.6f, 1e-6);
    request_free(&r);
    cr_assert_eq(parse(DIALECT_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                     "\"reasoning_effort\":\"bogus\"}", &r, &e), -1);
    cr_assert_str_eq(e.param, "reasoning_effort");
    request_free(&r);
    be.caps.think = false;
    cr_assert_eq(parse(DIALECT_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                     "\"reasoning_effort\":\"low\"}", &r, &e), -1);
    cr_assert_eq(err_http_status(e.code), 400);
    request_free(&r);
}

struct reject_case {
    enum dialect d;
    const char *body, *param;
    int status;
};

Test(api_parse, rejection_list_names_param)
{
#define U "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define I "\"input\":\"hi\""
#define A "\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
    static const struct reject_case cases[] = {
        {DIALECT_CHAT, "{" U ",\"temperature\":3}", "temperature", 400},
        {DIALECT_CHAT, "{" U ",\"top_p\":-0.1}", "top_p", 400},
        {DIALECT_CHAT, "{" U ",\"max_tokens\":0}", "max_tokens", 400},
        {DIALECT_CHAT, "{" U ",\"n\":99}", "n", 400},
        {DIALECT_CHAT, "{" U ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", 400},
        {DIALECT_CHAT, "{" U ",\"logit_bias\":{\"1\":200}}", "logit_bias", 400},
        {DIALECT_CHAT, "{" U ",\"grammar\":\"root ::= \\\"a\\\"\"}", "grammar", 400},
        {DIALECT_CHAT, "{" U ",\"functions\":[{\"name\":\"f\"}]}", "functions", 400},
        {DIALECT_CHAT, "{" U ",\"top_logprobs\":3}", "top_logprobs", 400},
        {DIALECT_CHAT, "{" U ",\"response_format\":{\"type\":\"json_object\"}}", "response_format", 400},
        {DIALECT_CHAT, "{" U ",\"regex\":\"a+\"}", "regex", 400},
        {DIALECT_CHAT, "{" U ",\"lark\":\"start: /a/\"}", "lark", 400},
        {DIALECT_CHAT, "{" U ",\"tool_choice\":\"required\",\"tools\":[]}", "tool_choice", 400},
        {DIALECT_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                       "\"image_url\":{\"url\":\"x\"}}]}]}", "messages[0].content[0].type", 400},
        {DIALECT_CHAT, "{\"messages\":[]}", "messages", 400},
        {DIALECT_CHAT, "{" U ",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]", 400},
        {DIALECT_RESPONSES, "{" I ",\"previous_response_id\":\"resp_1\"}", "previous_response_id", 400},
        {DIALECT_RESPONSES, "{" I ",\"conversation\":\"c\"}", "conversation", 400},
        {DIALECT_RESPONSES, "{" I ",\"background\":true}", "background", 400},
        {DIALECT_RESPONSES, "{" I ",\"truncation\":\"auto\"}", "truncation", 400},
        {DIALECT_RESPONSES, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0]", 400},
        {DIALECT_RESPONSES, "{" I ",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\","
                            "\"schema\":{}}}}", "text.format", 400},
        {DIALECT_RESPONSES, "{" I ",\"reasoning\":{\"effort\":\"max\"}}", "reasoning.effort", 400},
        {DIALECT_RESPONSES, "{" I ",\"top_logprobs\":21}", "top_logprobs", 400},
        {DIALECT_RESPONSES, "{" I ",\"top_logprobs\":-1}", "top_logprobs", 400},
        {DIALECT_RESPONSES, "{" I ",\"top_logprobs\":2.5}", "top_logprobs", 400},
        {DIALECT_RESPONSES, "{" I ",\"top_logprobs\":\"3\"}", "top_logprobs", 400},
        {DIALECT_RESPONSES, "{" I ",\"include\":\"message.output_text.logprobs\"}", "include", 400},
        {DIALECT_RESPONSES, "{" I ",\"include\":[\"reasoning.encrypted_content\",\"bogus\"]}",
         "include[1]", 400},
        {DIALECT_RESPONSES, "{" I ",\"include\":[7]}", "include[0]", 400},
        {DIALECT_MESSAGES, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "max_tokens", 400},
        {DIALECT_MESSAGES, "{" A ",\"temperature\":1.5}", "temperature", 400},
        {DIALECT_MESSAGES, "{" A ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\"}]}", "tools[0]", 400},
        {DIALECT_MESSAGES, "{" A ",\"tool_choice\":{\"type\":\"any\"}}", "tool_choice", 400},
        /* boolean schemas (issue 10 item 2): false matches nothing -> 400 naming where */
        {DIALECT_CHAT, "{" U ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                       "{\"name\":\"x\",\"schema\":false}}}", "response_format.json_schema.schema", 400},
        {DIALECT_CHAT, "{" U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                       "\"parameters\":false}}]}", "tools[0].function.parameters", 400},
        {DIALECT_CHAT, "{" U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                       "\"parameters\":\"object\"}}]}", "tools[0].function.parameters", 400},
        {DIALECT_RESPONSES, "{" I ",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\","
                            "\"schema\":false}}}", "text.format.schema", 400},
        {DIALECT_RESPONSES, "{" I ",\"tools\":[{\"type\":\"function\",\"name\":\"f\","
                            "\"parameters\":false}]}", "tools[0].parameters", 400},
        {DIALECT_MESSAGES, "{" A ",\"output_config\":{\"format\":{\"type\":\"json_schema\","
                           "\"schema\":false}}}", "output_config.format.schema", 400},
        {DIALECT_MESSAGES, "{" A ",\"tools\":[{\"name\":\"f\",\"input_schema\":false}]}",
         "tools[0].input_schema", 400},
        {DIALECT_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                           "[{\"type\":\"image\",\"source\":{}}]}]}", "messages[0].content[0].type", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct request r;
        struct err e;
        cr_assert_eq(parse(cases[i].d, cases[i].body, &r, &e), -1, "case %zu accepted", i);
        cr_assert_str_eq(e.param, cases[i].param, "case %zu: %s", i, e.msg);
        cr_assert_eq(err_http_status(e.code), cases[i].status, "case %zu: %s", i, e.msg);
        request_free(&r);
    }
}

Test(api_parse, bad_json_depth_and_utf8)
{
    struct request r;
    struct err e;
    cr_assert_eq(parse(DIALECT_CHAT, "{\"messages\":", &r, &e), -1);
    cr_assert_eq(e.code, ERR_INVALID);
    request_free(&r);
    char deep[300];
    memset(deep, '[', 200);
    deep[200] = 0;
    cr_assert_eq(parse(DIALECT_CHAT, deep, &r, &e), -1);
    cr_assert(strstr(e.msg, "nesting"), "%s", e.msg);
    request_free(&r);
    cr_assert_eq(parse(DIALECT_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", &r, &e), -1);
    request_free(&r);
    cr_assert_eq(parse(DIALECT_CHAT, "[1]", &r, &e), -1);
    request_free(&r);
}

Test(api_parse, responses_items_and_messages_blocks)
{
    struct request r;
    struct err e;
    cr_assert_eq(parse(DIALECT_RESPONSES,
                       "{\"instructions\":\"be brief\",\"input\":[{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"input_text\",\"text\":\"q\"}]},{\"type\":\"reasoning\",\"id\":\"r\","
                       "\"summary\":[]},{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\","
                       "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"c1\","
                       "\"output\":\"42\"}],\"tools\":[{\"type\":\"web_search\"},{\"type\":\"function\","
                       "\"name\":\"f\",\"parameters\":{}}],\"max_output_tokens\":9,"
                       "\"metadata\":{\"k\":\"v\"}}",
                       &r, &e),
                 0, "%s", e.msg);
    cr_assert_eq(r.n_msgs, 4);
    cr_assert_eq(r.msgs[0].role, CHAT_SYSTEM);
    cr_assert_eq(r.msgs[2].role, CHAT_ASSISTANT);
    cr_assert_eq(r.msgs[2].n_tool_calls, 1);
    cr_assert_eq(r.msgs[3].role, CHAT_TOOL);
    cr_assert_str_eq(r.msgs[3].content, "42");
    cr_assert_eq(json_array_size(r.tools), 1, "hosted web_search skipped, function kept");
    cr_assert_eq(r.max_tokens, 9);
    request_free(&r);

    cr_assert_eq(parse(DIALECT_MESSAGES,
                       "{\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cch=1\"},"
                       "{\"type\":\"text\",\"text\":\"sys\"}],\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                       "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"\"},"
                       "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\",\"input\":{\"a\":1}}]},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"ok\"}]}],"
                       "\"stop_sequences\":[\"Z\"],\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}",
                       &r, &e),
                 0, "%s", e.msg);
    cr_assert_eq(r.n_msgs, 4);
    cr_assert_str_eq(r.msgs[0].content, "sys", "billing nonce block removed");
    cr_assert_str_eq(r.msgs[2].tool_calls[0].arguments, "{\"a\": 1}", "tojson form, as the template renders an object");
    cr_assert_eq(r.msgs[3].role, CHAT_TOOL);
    cr_assert(r.reasoning);
    cr_assert_eq(r.max_tokens, 5);
    request_free(&r);
}

Test(api_parse, responses_logprobs_include_and_top_logprobs)
{
    struct request r;
    struct err e;
    /* both: logprobs with 3 alternatives per token */
    cr_assert_eq(parse(DIALECT_RESPONSES, "{\"input\":\"hi\",\"top_logprobs\":3,"
                                          "\"include\":[\"message.output_text.logprobs\"]}",
                       &r, &e), 0, "%s", e.msg);
    cr_assert(r.logprobs);
    cr_assert_eq(r.top_logprobs, 3);
    cr_assert_eq(r.sp.n_top_logprobs, 3);
    request_free(&r);
    /* include only: logprobs of the chosen tokens, no alternatives */
    cr_assert_eq(parse(DIALECT_RESPONSES, "{\"input\":\"hi\",\"include\":[\"reasoning.encrypted_content\","
                                          "\"message.output_text.logprobs\"]}", &r, &e), 0, "%s", e.msg);
    cr_assert(r.logprobs);
    cr_assert_eq(r.sp.n_top_logprobs, 0);
    request_free(&r);
    /* top_logprobs only (as on OpenAI): accepted and echoed, but no logprobs without include */
    cr_assert_eq(parse(DIALECT_RESPONSES, "{\"input\":\"hi\",\"top_logprobs\":20,\"include\":null}",
                       &r, &e), 0, "%s", e.msg);
    cr_assert(!r.logprobs);
    cr_assert_eq(r.top_logprobs, 20);
    cr_assert_eq(r.sp.n_top_logprobs, 0, "the sampler computes no alternatives");
    request_free(&r);
    /* other includables are accepted and change nothing */
    cr_assert_eq(parse(DIALECT_RESPONSES, "{\"input\":\"hi\",\"include\":[\"file_search_call.results\"]}",
                       &r, &e), 0, "%s", e.msg);
    cr_assert(!r.logprobs);
    request_free(&r);
    /* an unknown value names the supported ones */
    cr_assert_eq(parse(DIALECT_RESPONSES, "{\"input\":\"hi\",\"include\":[\"x.y\"]}", &r, &e), -1);
    cr_assert(strstr(e.msg, "'x.y'") && strstr(e.msg, "message.output_text.logprobs"), "%s", e.msg);
    request_free(&r);
}
