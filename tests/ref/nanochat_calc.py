#!/usr/bin/env python3
"""Differential test of lmserve's nanochat calculator (engine/text/calc.c, via lmserve-calc)
against Python itself behind nanochat's gate (tests/suites/46-nanochat-chat.sh).

  nanochat_calc.py LMSERVE_CALC [N]

The reference is the rule nanochat's engine.py states (use_calculator, written here from its
description): commas removed; an expression of only "0123456789*+-/.() " without "**", or one
of only letters, digits, quotes, "()._ " that contains ".count(" and none of the listed
dangerous words, is evaluated by Python's eval with no builtins; anything that raises gives no
answer; the answer is str(value). N seeded random expressions (default 4000) of both kinds, with
random spacing, commas, signs and parentheses, plus fixed edge cases, must give the same answer
or the same "no answer". The generator stays inside what calc.h documents: integers that fit
int64 at every step (operands below 1000, at most four operators), no Python keywords."""
import random
import subprocess
import sys
import warnings

MATH = set("0123456789*+-/.() ")
STR = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"()._ ")
DANGER = ["__", "import", "exec", "eval", "compile", "open", "file", "input", "raw_input",
          "globals", "locals", "vars", "dir", "getattr", "setattr", "delattr", "hasattr"]


def reference(expr):
    expr = expr.replace(",", "")
    if all(c in MATH for c in expr):
        if "**" in expr:
            return None
    else:
        if not all(c in STR for c in expr):
            return None
        if any(w in expr.lower() for w in DANGER) or ".count(" not in expr:
            return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = eval(expr, {"__builtins__": {}}, {})  # only gated arithmetic/strings reach here
    except Exception:
        return None
    return str(value)


# What calc.h documents as outside the subset while Python answers (or the reverse): each must
# really differ, so the list stays true.
DIVERGE = [
    ("1" * 30, "integers beyond int64 give no answer (the size limit)"),
    ("99999999999*99999999999", "an int64 overflow on the way gives no answer"),
    ("b'abc'.count(b'a')", "bytes literals are not evaluated"),
    ("-" * 3000 + "1", "CPython 3.11's parser gives up near 3,000 nested signs; calc takes any run"),
]


def sp(r):
    return r.choice(["", "", "", " ", "  "])


def number(r):
    k = r.random()
    if k < 0.55:
        s = str(r.randrange(0, 1000))
    elif k < 0.85:
        s = "%d.%s" % (r.randrange(0, 1000), "".join(r.choice("0123456789") for _ in range(r.randrange(0, 4))))
    elif k < 0.92:
        s = "." + str(r.randrange(0, 1000))
    else:
        s = r.choice(["0", "00", "000.5", "1.", "0.0", "007", "1,000", "12,3", "1.2.3", ".", "()"])
    return s


def arith(r, ops):
    if ops[0] <= 0 or r.random() < 0.3:
        s = number(r)
        if r.random() < 0.15:
            s = r.choice(["-", "+", "--", "- "]) + s
        return s
    ops[0] -= 1
    op = r.choice(["+", "-", "*", "/", "//", "*", "-", "**", "/ /", ""])
    s = arith(r, ops) + sp(r) + op + sp(r) + arith(r, ops)
    if r.random() < 0.35:
        s = "(" + sp(r) + s + sp(r) + ")"
    if r.random() < 0.1:
        s = "-" + s
    return s


WORDS = ["strawberry", "banana", "r", "an", "", "a b", "Mississippi", "ss", "A", "x_y", "dir",
         "file", "openai", "pop", "e", "3", "a.b", "()", "count", " "]


def strlit(r):
    w = r.choice(WORDS)
    q = r.choice(["'", '"'])
    if q in w:
        w = w.replace(q, "")
    s = r.choice(["", "", "", "r", "u", "f", "R", "rf", "x"]) + q + w + q
    if r.random() < 0.1:
        s += sp(r) + strlit(r)
    return s


def strexpr(r, depth=0):
    s = strlit(r)
    if r.random() < 0.15:
        s = "(" + s + ")"
    for _ in range(r.randrange(1, 3) if depth == 0 else r.randrange(0, 2)):
        m = r.choice(["count", "count", "count", "lower", "upper", "strip", "rstrip", "index", "cnt"])
        arg = strexpr(r, depth + 1) if m in ("count", "index") or r.random() < 0.2 else ""
        s += sp(r) + "." + m + sp(r) + "(" + arg + ")"
    if r.random() < 0.05:
        s = r.choice(["x", "len(", "().count(", "(", "'"]) + s
    return s


def cases(n):
    r = random.Random(16)
    fixed = ["1+2", "7/2", "7//2", "-7//2", "7//-2", "-7.5//2", "7.5//-2", "0.1+0.2", "1/3", "2/3",
             "10/0", "10//0", "1.0/0", "5.//0.", "()", "()+()", "()*3", "3*()", "-()", "()*2.0",
             "2**3", "2* *3", "1e5", "01", "00", "0.0", "-0.0", "100000000000000000.0",
             "0.0001", "0.00001", "1,234,567 * 3", " 3", "3 ", "(((1)))", "(1)(2)", "1 2", "",
             ",", "1+", "+1", "--1", "- -1", "9223372036854775807", "-9223372036854775807-1",
             "999999999*999999999", "123456789012345678//7", "'strawberry'.count('r')",
             '"strawberry".count("r")', "'banana'.count('an')", "'aaa'.count('')",
             "'Hello World'.lower().count('o')", "'abc'.count('a') 1", "'dir'.count('d')",
             "'x'.count('x')", "''.count('')", "'a b c'.count(' ')", "().count('x')",
             "'''a'b'''.count('a')", "'.count('", "'abc' 'abc'.count('bc')", "'abc'.count(b'a')",
             "x.count('a')", "'a'.count('a'", "'a'.count('a'))",
             "'a'.upper().count('A')", "'  a  '.strip().count(' ')", "'xxaxx'.strip('x')",
             "'abc'.count('a').count('a')", "'a,b'.count(',')", "'ab'.cnt('a')",
             "'abc'.index('b')", "f'abc'.count('c')", "rf'abc'.count('c')", "u'ab'.count('a')",
             "ur'ab'.count('a')", "'a' .count ( 'a' )", "(('aa')).count(('a'))",
             "(" * 199 + "1" + ")" * 199, "(" * 201 + "1" + ")" * 201,
             "-" * 2000 + "1", "1.5.5", "3.(2)", "2(3)", "1 // 2 // 3", "1///2", "8/2/2",
             "2-3-4", "2*3+4*5", "-2*-3", "1.0*10", "123.456*1000", "0.1*3", "1/7*7"]
    out = list(fixed) + [d for d, _ in DIVERGE]
    for _ in range(n):
        out.append(arith(r, [r.randrange(0, 5)]) if r.random() < 0.65 else strexpr(r))
    return out


def main():
    tool = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    exprs = cases(n)
    inp = "".join(e.encode().hex() + "\n" for e in exprs)
    res = subprocess.run([tool, "--hex"], input=inp.encode(), capture_output=True, check=True)
    lines = res.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(exprs), (len(lines), len(exprs))
    bad, answered = 0, 0
    div = dict(DIVERGE)
    for e, got in zip(exprs, lines):
        want = reference(e)
        mine = None if got == "-" else got.split("\t", 1)[1]
        answered += want is not None
        if e in div:
            if mine == want:
                bad += 1
                print("FAIL listed divergence %r does not differ (%s)" % (e[:60], div[e]))
            continue
        if mine != want:
            bad += 1
            if bad <= 20:
                print("FAIL %r: lmserve %r, Python %r" % (e[:120], mine, want))
    print("calculator: %d expressions (%d with an answer) compared with Python's eval behind "
          "nanochat's gate: %d differ; %d listed divergences:" % (len(exprs), answered, bad,
                                                                 len(DIVERGE)))
    for d, why in DIVERGE:
        print("  %r: %s" % (d[:40], why))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
