#!/usr/bin/env python3
"""Seed inputs for fuzz-request: one rich body per dialect under a few capability flag bytes.
Byte 0 = dialect (value mod 5: chat, responses, messages, completions, embeddings) + capability bits (see tests/fuzz/fuzz_request.c); rest = JSON."""
import json
import os
import sys

SEEDS = [
    (0, {"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "1"}],
        "stop": ["a", "b"], "n": 2, "logprobs": True, "top_logprobs": 2, "stream": True,
        "stream_options": {"include_usage": True}, "max_tokens": 5, "reasoning_effort": "high",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}}),
    (1, {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "x"},
        {"type": "reasoning", "summary": []}],
        "instructions": "be", "text": {"format": {"type": "json_object"}}, "reasoning": {"effort": "low"},
        "tools": [{"type": "web_search"}, {"type": "function", "name": "f"}], "stream": True,
        "metadata": {"a": "b"}, "regex": "a+", "top_logprobs": 3,
        "include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}),
    (2, {"max_tokens": 4, "system": [{"type": "text", "text": "s"}], "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": ""},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"a": [1, 2.5, None, True]}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "ok"}]}]}],
        "stop_sequences": ["x"], "thinking": {"type": "enabled", "budget_tokens": 10},
        "tools": [{"name": "f", "input_schema": {"type": "object"}}], "stream": True}),
    (3, {"prompt": "Once", "max_tokens": 3, "n": 2, "logprobs": 2, "echo": False, "stop": ["x"],
         "stream": True, "stream_options": {"include_usage": True}, "seed": 3, "logit_bias": {"5": -100},
         "json_schema": {"type": "object"}}),
    (3, {"prompt": [[1, 2, 3]], "echo": True, "temperature": 0.5}),
    (4, {"input": ["a", [1, 2], "b"], "encoding_format": "base64"}),
]

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for i, (d, body) in enumerate(SEEDS):
    for flags in (0, 4 | 8 | 16, 128 | 4):
        b = flags - flags % 5 + d
        if b > 255:
            b -= 5
        with open(os.path.join(out, f"seed{i}_{flags}"), "wb") as f:
            f.write(bytes([b]) + json.dumps(body).encode())
