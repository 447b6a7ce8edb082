#!/usr/bin/env python3
"""Writes the committed seed corpus of build/fuzz-worker (tests/fuzz/worker-seeds/): replies in
the target's input format (tests/fuzz/fuzz_worker.c) — empty, a lone end-of-turn, think blocks and
stray closers, stop strings split and overlapping, UTF-8 split and invalid, tool calls whole,
split, malformed, unclosed and several, a refusing sink. Usage: worker_seeds.py DIR"""
import os
import sys


def enc(flags, stops, toks, refuse=0):
    b = bytes([flags, refuse])
    for s in stops:
        s = s.encode() if isinstance(s, str) else s
        b += bytes([len(s)]) + s
    for t in toks:
        t = t.encode() if isinstance(t, str) else t
        while len(t) > 15:  # a token is at most 15 bytes in this format
            b += bytes([15]) + t[:15]
            t = t[15:]
        b += bytes([len(t)]) + t
    return b


def fl(think=0, tools=0, lp=0, nstop=0, length=0, refuse=0):
    return think | (tools << 1) | (lp << 2) | (nstop << 3) | (length << 5) | (refuse << 6)


SEEDS = {
    'empty': enc(fl(), [], []),
    'empty-think-tools-stops': enc(fl(1, 1, 1, 2), ['a', '</'], []),
    'lone-eot-bytes': enc(fl(1), [], ['']),
    'think-block': enc(fl(1, 0, 1), [], ['<think>', '\n', 'let me', ' see', '\n', '</think>', '\n\n', 'Hi', '!']),
    'think-split': enc(fl(1, 0, 1), [], ['<th', 'ink>', 'a', '</thi', 'nk>', 'b']),
    'think-unclosed': enc(fl(1, 0, 0, 0, 1), [], ['<think>', 'a', '  ', '</th']),
    'stray-closer': enc(fl(1), [], ['</', 'think>', '\n\n', 'Hello']),
    'head-undecided-stop': enc(fl(1, 0, 0, 1), ['<t'], ['<th']),
    'stop-split': enc(fl(0, 0, 1, 2), ['END', 'xyz'], ['ab', 'E', 'N', 'D', 'more']),
    'stop-overlap': enc(fl(0, 0, 0, 2), ['abc', 'b'], ['ab', 'c']),
    'stop-whitespace': enc(fl(1, 0, 0, 1), ['\n\n'], ['\n', '\n', 'x']),
    'utf8-split': enc(fl(1, 0, 1), [], [b'a\xe2\x82', b'\xac', b'b', b'\xf0\x9f', b'\x98\x80']),
    'utf8-invalid': enc(fl(0), [], [b'\x80\x80', b'\xff', b'\xc3']),
    'tool-call': enc(fl(1, 1, 1), [], ['<tool_call>', '\n{"name": "f"', ', "arguments"', ': {"a": 1}}', '\n</tool_call>']),
    'tool-call-split': enc(fl(0, 1), [], ['text <tool', '_call>{"name":', '"g"}</tool_', 'call> tail']),
    'tool-bad': enc(fl(0, 1), [], ['<tool_call>', '{"name": 5}', '</tool_call>']),
    'tool-unclosed': enc(fl(0, 1, 0, 0, 1), [], ['<tool_call>', '{"name": "f"']),
    'tool-two': enc(fl(1, 1, 0, 1), ['STOP'], ['</think>', '<tool_call>', '{"name":"a"}', '</tool_call>', '\n<tool_call>',
                                               '{"name":"b",', '"arguments":{}}', '</tool_call>']),
    'refuse': enc(fl(1, 1, 1, 1, 0, 1), ['x'], ['<think>', 'a', '</think>', 'b', 'c'], refuse=2),
}

if __name__ == '__main__':
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)
