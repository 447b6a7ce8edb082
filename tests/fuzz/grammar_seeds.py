#!/usr/bin/env python3
"""Seeds for fuzz-grammar (tests/fuzz/fuzz_grammar.c): first byte = kind (0 regex, 1 lark,
2 JSON Schema, 3 GBNF; +4k varies the token choices), rest = source. Written from the repo's own test
grammars plus a few hand-made ones covering each compiler's constructs."""
import glob, json, os, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
seeds = []
regexes = [r"abc", r"a|b|cd", r"(ab)*c", r"[a-c]+\d{2,4}", r"[^\"\\]*", r"^(a|b)+$", r"a{0,40}",
           r"(a|bc){0,50}(a{0,40}|x)", r"\u00e9+\x41\x{e9}", r"[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?",
           r"(?:ab|a)(?:bc|c)", r"(?P<n>x)+?y{3,}", r"日本+語?", r"[\s\S]{1,3}", r"(a|bb){0,5000}"]
for r in regexes:
    seeds.append(b"\x00" + r.encode())
larks = ["start: e\ne: t (\"+\" t)*\nt: \"a\" | \"(\" e \")\"\n",
         "start: s\ns: s s | \"a\"\n",
         "start: <tool_call> \"x\" </tool_call>\n",
         "start: A B?\nA: /[a-z]+/\nB: \"!\"i\n%ignore \" \"\n",
         "start: x{2,5} | y~3\nx: \"x\"\ny: \"y\"\n",
         "%import common.NUMBER\nstart: NUMBER (\",\" NUMBER)*\n",
         "start: %json{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}\n",
         "start: [\"a\"] \"b\"* (\"c\" | \"d\")+\n",
         # a number as the last byte of the source (no NUL after it): lark.c's parse_int read past it
         "start: x{2,5} | y~3"]
for path in sorted(glob.glob("tests/grammar/*.lark")):
    larks.append(open(path).read())
for l in larks:
    seeds.append(b"\x01" + l.encode())
schemas = [{"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                             "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"]},
           {"type": "array", "items": {"enum": ["a", 1, None, True]}, "minItems": 1, "maxItems": 3},
           {"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "number", "multipleOf": 0.5}]},
           {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
           {"type": "string", "format": "date-time"},
           {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"required": ["a"]}]},
           {"type": "object", "additionalProperties": {"type": "boolean"}, "x-whitespace": "pretty"},
           {"oneOf": [{"const": 1}, {"const": "x"}]},
           {"not": {"enum": ["a", "b"]}, "type": "string"}, True, False, {},
           # the rewritten conditional keywords (jsonschema_cond.c) and a label in a length region
           {"type": "object", "properties": {"k": {"enum": ["a", "b"]}, "x": {"type": "integer"}},
            "if": {"properties": {"k": {"const": "a"}}, "required": ["k"]},
            "then": {"required": ["x"]}, "else": {"properties": {"x": False}},
            "dependentSchemas": {"x": {"required": ["k"]}}, "propertyNames": {"enum": ["k", "x", "y"]}},
           {"type": "string", "format": "email", "maxLength": 254}]
for s in schemas:
    seeds.append(b"\x02" + json.dumps(s).encode())
for path in sorted(glob.glob("tests/grammar/gbnf/*.gbnf")):
    seeds.append(b"\x03" + open(path, "rb").read())
for i, s in enumerate(seeds):
    open(os.path.join(out, "seed-%03d" % i), "wb").write(s)
